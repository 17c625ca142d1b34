//! Sparse allreduce in Flare (seed 004 §7) and its baselines.
