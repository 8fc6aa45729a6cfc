// tutti::compiled: communicator<shm> with algo::automatic (tutti/compiled.hpp), its members and
// every collective's erased runs, compiled once.
#include "tutti/tutti.hpp"

template class tutti::communicator<tutti::shm>;
