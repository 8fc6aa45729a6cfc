// The umbrella header alone.
#include <tutti/tutti.hpp>
int main() {}
