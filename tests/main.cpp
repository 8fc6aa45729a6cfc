// doctest's implementation and main(): the object library tutti_doctest_main (tests/CMakeLists.txt),
// compiled once and linked into every test program.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
