// Everything is static inline in the header; SwiftPM wants one source file to make the module.
#include "CByteLanes.h"
