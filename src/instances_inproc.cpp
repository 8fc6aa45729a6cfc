// tutti::compiled: communicator<inproc> with algo::automatic (tutti/compiled.hpp), its members and
// every collective's erased runs, compiled once; and algo::automatic's own members.
#include "tutti/tutti.hpp"

template class tutti::communicator<tutti::inproc>;
template struct tutti::algo::automatic_of<tutti::algo::ring, tutti::algo::tree, tutti::algo::recursive_doubling,
                                          tutti::algo::direct, tutti::algo::shared_memory, tutti::algo::native>;
