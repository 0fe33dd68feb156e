# How the preload library (libtessera-cuda.so, src/hook) and the static code it carries are
# compiled, so that the library needs at most glibc 2.28 and no C++ runtime at all
# (docs/design/0020-deployment.md, "The preload library's floor"):
#   - no exceptions, no RTTI: nothing refers to the unwinder, the personality routine or
#     typeinfo, which live in libstdc++/libgcc_s;
#   - src/hook/glibc_floor.h force-included: each glibc function bound to its 2.28 version;
#   - the library links with the C driver (no libstdc++), libgcc statically, and
#     src/hook/cxx_runtime.cc for the little C++ runtime it uses (src/hook/CMakeLists.txt).
# Sanitizer and fuzz builds keep the usual C++ runtime and glibc versions: their runtimes
# intercept operator new and the pthread calls, and their libraries are never shipped.
if(TESSERA_ASAN OR TESSERA_TSAN OR TESSERA_UBSAN OR TESSERA_FUZZ)
  set(TESSERA_PRELOAD_FREESTANDING OFF)
else()
  set(TESSERA_PRELOAD_FREESTANDING ON)
endif()

# Compile TARGET's objects as objects of the preload library.
function(tessera_preload_objects target)
  target_compile_options(${target} PRIVATE -fno-exceptions -fno-rtti)
  if(TESSERA_PRELOAD_FREESTANDING)
    target_compile_options(${target} PRIVATE
      "SHELL:-include ${PROJECT_SOURCE_DIR}/src/hook/glibc_floor.h")
  endif()
endfunction()
