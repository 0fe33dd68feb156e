// A plugin, loaded with dlopen, that looks symbols up with dlsym(RTLD_NEXT, ...): glibc
// resolves that relative to the plugin, and the preload library's dlsym must not change it.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) void* plugin_lookup_next(const char* name) {
  return dlsym(RTLD_NEXT, name);
}
