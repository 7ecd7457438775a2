package sqlite

/*
// stdlib.h brings the C library's features.h, which defines __GLIBC__
// under glibc: the checks below need it first.
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

// agentd_return_freed_memory hands the C heap's free pages back to the
// kernel. glibc keeps what SQLite frees in its arenas (one for each thread
// that ran SQLite) until asked; other C libraries have no such call.
static void agentd_return_freed_memory(void) {
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}

// agentd_c_heap_in_use is the bytes the C heap has handed out, or -1 where
// the C library cannot say.
static long long agentd_c_heap_in_use(void) {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)
	struct mallinfo2 mi = mallinfo2();
	return (long long)(mi.uordblks + mi.hblkhd);
#else
	return -1;
#endif
}
*/
import "C"

// returnFreedMemory returns the C heap's free pages (what SQLite freed) to
// the system, so the process's resident memory shrinks with it.
func returnFreedMemory() { C.agentd_return_freed_memory() }

// cHeapInUse is how many bytes of the C heap are allocated (SQLite's page
// caches among them), or -1 when the C library does not say.
func cHeapInUse() int64 { return int64(C.agentd_c_heap_in_use()) }
