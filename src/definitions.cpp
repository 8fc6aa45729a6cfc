// tutti::compiled: the definitions of tutti's functions that are not templates (the `.ipp` files
// beside the headers; see `TUTTI_DECL` in tutti/detail/attributes.hpp), compiled once. Every
// header whose `.ipp` holds definitions is reached from here.
#define TUTTI_BUILDING_COMPILED 1
#include "tutti/bootstrap/locality.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/transport/tcp.hpp"
#include "tutti/tutti.hpp"
