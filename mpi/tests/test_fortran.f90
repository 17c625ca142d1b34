! Fortran bindings through the interposition library: MPI_ALLREDUCE (mpif.h-style module
! `mpi`) with and without MPI_IN_PLACE must equal the exact sum; prints PASS or FAIL.
program test_fortran
  use mpi
  implicit none
  integer :: ierr, rank, p, i, bad
  integer, parameter :: n = 1001
  integer :: a(n), b(n)
  double precision :: d(n)
  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, p, ierr)
  bad = 0
  do i = 1, n
    a(i) = i * (rank + 1)
    d(i) = dble(i + rank)
  end do
  call MPI_ALLREDUCE(a, b, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (ierr /= MPI_SUCCESS) bad = bad + 1
  do i = 1, n
    if (b(i) /= i * p * (p + 1) / 2) bad = bad + 1
  end do
  call MPI_ALLREDUCE(MPI_IN_PLACE, d, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (ierr /= MPI_SUCCESS) bad = bad + 1
  do i = 1, n
    if (d(i) /= dble(i * p + p * (p - 1) / 2)) bad = bad + 1
  end do
  call MPI_ALLREDUCE(MPI_IN_PLACE, bad, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (bad == 0) then
      print '(a)', 'test_fortran: PASS'
    else
      print '(a,i0)', 'test_fortran: FAIL ', bad
    end if
  end if
  call MPI_FINALIZE(ierr)
end program test_fortran
