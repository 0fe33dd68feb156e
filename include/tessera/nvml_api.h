// nvml.h with every entry point under its real exported name (no "auto upgrading" macros).
#pragma once

#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
