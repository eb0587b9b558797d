# Fails the build when an instruction-set object file (avx2/, avx512/, vnni/, amx/) defines a weak
# code symbol: a template or inline function instantiated there may be the copy the linker keeps for
# generic callers, which would then execute AVX-512/AMX instructions on any CPU.
# Invoked after fp4serve_kernels is built with -DNM=<nm> -DOBJECTS=<object files joined by '|'>.
string(REPLACE "|" ";" objects "${OBJECTS}")
foreach(obj IN LISTS objects)
  if(NOT obj MATCHES "/(avx2|avx512|vnni|amx)/")
    continue()
  endif()
  execute_process(COMMAND ${NM} -C ${obj} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_isa_objects: ${NM} failed on ${obj}")
  endif()
  # W: weak code. Weak data (V, u: e.g. DW.ref.__gxx_personality_v0, static locals) runs nothing.
  string(REGEX MATCHALL "[^\n]* W [^\n]*" weak "${syms}")
  if(weak)
    string(REPLACE ";" "\n  " weak "${weak}")
    message(FATAL_ERROR "${obj} defines weak symbols (instantiated with ISA flags; move them to generic code):\n  ${weak}")
  endif()
endforeach()
