/*
 * A libfiu failure point on mmap(2) of segment files only: "kompakt/segment/mmap".
 *
 * Why not libfiu's own "posix/mm/mmap": it fails every mmap call of the process,
 * and most of them are not reads of a disk: CPython's thread and arena memory and
 * LLVM's JIT sections (numba) map anonymous memory, and LLVM aborts the process when
 * that fails ("Unable to allocate section memory"). A failing data disk fails none of
 * them. This wrapper asks libfiu (fiu_fail, switched by fiu-ctrl like every other
 * point) only for a file-backed mapping of a ".log" file, the way the cleaner reads a
 * segment (kompakt.cleaner.segment_io.segment_buffer), and fails it with EIO.
 *
 * Compiled at run time by reliability/fiu.py and preloaded after libfiu's own
 * libraries (fiu_run_preload.so sets up libfiu and its control pipes).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

extern int fiu_fail(const char *name);

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
static mmap_fn next_mmap;

static int is_segment(int fd)
{
	char link[64], path[4096];
	ssize_t n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof path - 1);
	if (n < 4)
		return 0;
	path[n] = '\0';
	return strcmp(path + n - 4, ".log") == 0;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (next_mmap == NULL)
		next_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
	if (fd >= 0 && !(flags & MAP_ANONYMOUS) && is_segment(fd) &&
	    fiu_fail("kompakt/segment/mmap")) {
		errno = EIO;
		return MAP_FAILED;
	}
	return next_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}
