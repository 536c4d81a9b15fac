#include "olddep.h"

int olddep_value(void) { return 4; }
