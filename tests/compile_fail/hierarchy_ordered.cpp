// Must NOT compile: a hierarchy reduces group by group, not in rank order, so it refuses a
// rank-ordered op (op::ordered) at compile time instead of giving other bits than it promises.
#include <tutti/group/hierarchy.hpp>
#include <tutti/transport/inproc.hpp>
#include <vector>

void reduce_in_rank_order(tutti::hierarchy<tutti::inproc, tutti::inproc>& h) {
  std::vector<float> v(8);
  h.all_reduce(tutti::view(v), tutti::op::ordered_sum{});
}
