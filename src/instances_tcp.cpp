// tutti::compiled: communicator<tcp> with algo::automatic (tutti/compiled.hpp), its members and
// every collective's erased runs, compiled once.
#include "tutti/tutti.hpp"
#include "tutti/transport/tcp.hpp"

template class tutti::communicator<tutti::tcp>;
