# Warning flags for every tessera target (Falco CompilerFlags.cmake idea).
# -Wnull-dereference is left out and -Wrestrict turned off for GCC: GCC 12 reports false
# positives inside libstdc++ (-O2/-O3, "literal" + std::string&&; GCC bug 105329).
add_library(tessera_warnings INTERFACE)
target_compile_options(tessera_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wconversion -Wsign-conversion -Wformat=2
  -Wimplicit-fallthrough
  $<$<CXX_COMPILER_ID:Clang>:-Wthread-safety>
  $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
if(TESSERA_WERROR)
  target_compile_options(tessera_warnings INTERFACE -Werror)
endif()
