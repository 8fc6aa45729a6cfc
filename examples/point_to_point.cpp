// Point-to-point as MPI and torch.distributed programs write it, on threads (tutti::inproc):
//  1. the ring all-reduce of PyTorch's "Writing Distributed Applications" tutorial: isend to the
//     right, blocking recv from the left, wait, on 4 ranks;
//  2. a halo exchange on a periodic 3 x 2 grid of ranks: every rank posts its 4 receives and 4
//     sends, then waits for all of them (the north and south neighbours are one rank here: the
//     tags tell the messages apart);
//  3. a manager and workers: rank 0 serves requests from any_source until every worker says it
//     is done.
// The programs are in point_to_point.hpp, for any transport that matches point-to-point itself
// (the tests run them over MPI too). Each prints what its ranks got; the example exits non-zero
// if a result is wrong.
#include "point_to_point.hpp"

int main() {
  tutti::inproc::run(4, [](auto& comm) { tutti_examples::ring_example(comm); });
  tutti::inproc::run(6, [](auto& comm) { tutti_examples::halo_exchange(comm, 3, 2); });
  tutti::inproc::run(4, [](auto& comm) { tutti_examples::manager_workers(comm); });
  return tutti_examples::wrong == 0 ? 0 : 1;
}
