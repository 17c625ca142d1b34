#!/bin/sh
# PLACE=spread: rank r on CPU r mod 2; PLACE=one: every rank on CPU 0; else unbound
case "$PLACE" in
  spread) exec taskset -c $((OMPI_COMM_WORLD_RANK % 2)) "$@" ;;
  one) exec taskset -c 0 "$@" ;;
  *) exec "$@" ;;
esac
