/*
 * Two libfiu failure points on reads of segment files (".log") only:
 *   "kompakt/segment/pread"  pread(2)/pread64(2), how a Fetch reads a segment;
 *   "kompakt/segment/mmap"   mmap(2)/mmap64(2) of a file, how a clean reads one.
 * Switched at run time by fiu-ctrl like any libfiu point; a failing call returns EIO.
 *
 * Why not libfiu's POSIX preload (fiu-run -x, "posix/io/rw/pread", "posix/mm/mmap"):
 * - it wraps malloc, strdup and ~150 other calls and consults libfiu in each, even with
 *   nothing enabled; a broker under it deadlocked when pyarrow's jemalloc thread
 *   allocated its TLS (glibc holds the loader lock, the malloc wrapper's lazy dlsym
 *   waits for it): gdb stack in the commit that added this file;
 * - "posix/mm/mmap" fails every mapping, CPython's thread and arena memory and numba's
 *   LLVM JIT sections too (LLVM aborts the process), which no failing disk does.
 * Here only file-backed calls on a ".log" descriptor ask libfiu anything; every other
 * call goes straight to libc.
 *
 * Compiled at run time by reliability/fiu.py and preloaded after libfiu's
 * fiu_run_preload.so (which initialises libfiu and serves its control pipes).
 *
 * Built with -DFLAG_SWITCH it asks no library, for Spark's Python workers, which
 * libfiu's control pipes cannot reach (pyspark's daemon forks and reuses them, and a
 * forked child has no control thread): while the file named by
 * $KOMPAKT_FAIL_READS_FLAG exists, the same calls fail with EIO at the probability
 * written in it ("0.5"). The campaign hands that build to the workers with
 * spark.executorEnv.LD_PRELOAD; creating and removing the file is the switch.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
static mmap_fn next_mmap;
static pread_fn next_pread;

static int is_segment(int fd)
{
	char link[64], path[4096];
	ssize_t n;

	if (fd < 0)
		return 0;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof path - 1);
	if (n < 4)
		return 0;
	path[n] = '\0';
	return strcmp(path + n - 4, ".log") == 0;
}

#ifdef FLAG_SWITCH
static unsigned long long rng_state;

/* xorshift64*, seeded per process (workers are forked: the pid differs) */
static double uniform(void)
{
	if (rng_state == 0)
		rng_state = ((unsigned long long)getpid() << 32) ^ (unsigned long long)time(NULL) ^ 0x9E3779B97F4A7C15ULL;
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (double)((rng_state * 2685821657736338717ULL) >> 11) / (double)(1ULL << 53);
}

/* the probability in the switch file, or 0 when there is none */
static double failing(void)
{
	const char *flag = getenv("KOMPAKT_FAIL_READS_FLAG");
	char buf[32];
	ssize_t n;
	int fd;

	if (flag == NULL || *flag == '\0')
		return 0.0;
	fd = open(flag, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0.0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 1.0;
	buf[n] = '\0';
	return atof(buf);
}

static int should_fail(const char *point)
{
	double p;

	(void)point;
	p = failing();
	return p > 0.0 && uniform() < p;
}
#else
extern int fiu_fail(const char *name);

static int should_fail(const char *point)
{
	return fiu_fail(point);
}
#endif

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (next_mmap == NULL)
		next_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
	if (!(flags & MAP_ANONYMOUS) && is_segment(fd) && should_fail("kompakt/segment/mmap")) {
		errno = EIO;
		return MAP_FAILED;
	}
	return next_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

ssize_t pread(int fd, void *buf, size_t count, off_t off)
{
	if (next_pread == NULL)
		next_pread = (pread_fn)dlsym(RTLD_NEXT, "pread");
	if (is_segment(fd) && should_fail("kompakt/segment/pread")) {
		errno = EIO;
		return -1;
	}
	return next_pread(fd, buf, count, off);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t off)
{
	return pread(fd, buf, count, off);
}
