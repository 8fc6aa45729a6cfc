/// \file
/// The transport concept: what an algorithm needs from whatever moves the bytes, and the
/// capabilities a transport may add (`capabilities.hpp`, where each is documented). Transports
/// are built from the toolkit (`toolkit.hpp`) and checked against the contract by
/// `tutti/testing/conformance.hpp`.
#pragma once

#include "tutti/transport/capabilities.hpp"
