! The mpi_f08 module's MPI_Allreduce (Open MPI: ompi_allreduce_f) through the interposition
! library, with and without MPI_IN_PLACE; prints PASS or FAIL.
program test_fortran08
  use mpi_f08
  implicit none
  integer :: rank, p, i, bad
  integer, parameter :: n = 777
  integer :: a(n), b(n)
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, p)
  bad = 0
  do i = 1, n
    a(i) = i + 1000 * rank
  end do
  call MPI_Allreduce(a, b, n, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD)
  call MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  do i = 1, n
    if (b(i) /= i + 1000 * (p - 1)) bad = bad + 1
    if (a(i) /= i * p + 1000 * p * (p - 1) / 2) bad = bad + 1
  end do
  call MPI_Allreduce(MPI_IN_PLACE, bad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) then
    if (bad == 0) then
      print '(a)', 'test_fortran08: PASS'
    else
      print '(a,i0)', 'test_fortran08: FAIL ', bad
    end if
  end if
  call MPI_Finalize()
end program test_fortran08
