/*
 * LD_PRELOAD shim for the power-cut tests (src/store/tests/powercut.rs,
 * tests/it/powercut.rs; DECISIONS D9).
 *
 * For every regular file under $OUTPOST_PCUT_DIR (except SQLite's -shm, which SQLite
 * rebuilds after a crash), it appends to $OUTPOST_PCUT_LOG, before each write or
 * truncate, what that call is about to overwrite: the old bytes and the old size. An
 * fsync/fdatasync of a file is logged too, when it starts and when it succeeded. After
 * the process is killed, the test (powercut_shim.rs) rolls each file back over the
 * entries logged since the start of its last completed sync, or in alternate runs over
 * a random suffix of them with the first one torn: what a power cut may leave.
 *
 * Record: kind u8 ('W' write, 'T' truncate, 'B' sync begins, 'S' sync done) |
 * dev u64 | ino u64 | path_len u16 | path | off u64 (for B/S: the sync's token) |
 * old_size u64 | len u64 (bytes written; for T: bytes cut off) | old_len u64 |
 * old bytes (little-endian).
 * The log starts with "PCUT1\n" (the test checks it: proof the shim was loaded).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
/* $OUTPOST_PCUT_KILL_AT: the process SIGKILLs itself right after that many tracked
 * writes and truncates (0: never), so every cut lands just after a write. */
static unsigned long kill_at, writes;
/* $OUTPOST_PCUT_ARM: if set, writes count towards kill_at only once this file exists. */
static const char *arm;
static const char *dir;
static size_t dir_len;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

/* A child forked to run another program (a node's tool) logs nothing, and must not
 * wait on a lock another thread of the parent held at the fork. */
static void in_child(void) {
  pthread_mutex_init(&lock, NULL);
  log_fd = -1;
}

__attribute__((constructor)) static void init(void) {
  pthread_atfork(NULL, NULL, in_child);
  real_write = dlsym(RTLD_NEXT, "write");
  real_pwrite = dlsym(RTLD_NEXT, "pwrite");
  real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
  real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
  real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
  real_fsync = dlsym(RTLD_NEXT, "fsync");
  real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
  /* Processes this one starts (a node's tools) must not load the shim too. */
  unsetenv("LD_PRELOAD");
  const char *path = getenv("OUTPOST_PCUT_LOG");
  dir = getenv("OUTPOST_PCUT_DIR");
  if (!path || !dir) return;
  dir_len = strlen(dir);
  const char *k = getenv("OUTPOST_PCUT_KILL_AT");
  if (k) kill_at = strtoul(k, NULL, 10);
  arm = getenv("OUTPOST_PCUT_ARM");
  log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd >= 0) real_write(log_fd, "PCUT1\n", 6);
}

static void out(const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = real_write(log_fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) abort(); /* a lost record would make the roll-back wrong */
    c += w;
    n -= (size_t)w;
  }
}

static void out_u64(uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  out(b, 8);
}

/* Is fd a tracked file? Fills its path, device, inode and size. */
static int tracked(int fd, char *path, size_t cap, struct stat *st) {
  if (log_fd < 0 || fd == log_fd) return 0;
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) return 0;
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, cap - 1);
  if (n <= 0) return 0;
  path[n] = 0;
  if ((size_t)n <= dir_len || strncmp(path, dir, dir_len) != 0 || path[dir_len] != '/')
    return 0;
  if (n >= 4 && strcmp(path + n - 4, "-shm") == 0) return 0;
  return 1;
}

/* Logs what [off, off+len) of fd holds now (the part below the current size). */
static void record(char kind, int fd, const char *path, const struct stat *st,
                   uint64_t off, uint64_t len) {
  uint64_t size = (uint64_t)st->st_size;
  uint64_t old_len = 0;
  if (off < size) old_len = (size - off < len) ? size - off : len;
  char *old = NULL;
  if (old_len > 0) {
    old = malloc(old_len);
    if (!old) abort();
    /* The fd may be write-only: read through a fresh read-only open of the same file. */
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int rfd = open(link, O_RDONLY | O_CLOEXEC);
    uint64_t got = 0;
    while (rfd >= 0 && got < old_len) {
      ssize_t r = pread(rfd, old + got, old_len - got, (off_t)(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (uint64_t)r;
    }
    if (rfd >= 0) close(rfd);
    if (got != old_len) abort();
  }
  uint16_t plen = (uint16_t)strlen(path);
  out(&kind, 1);
  out_u64((uint64_t)st->st_dev);
  out_u64((uint64_t)st->st_ino);
  out(&plen, 2);
  out(path, plen);
  out_u64(off);
  out_u64(size);
  out_u64(len);
  out_u64(old_len);
  if (old_len > 0) out(old, old_len);
  free(old);
}

/* Called after each write or truncate that was logged. */
static void counted(int logged) {
  if (!logged || kill_at == 0) return;
  if (arm && access(arm, F_OK) != 0) return;
  if (++writes == kill_at) raise(SIGKILL);
}

static int note_write(int fd, off_t off, size_t len, int positional) {
  char path[4096];
  struct stat st;
  if (!tracked(fd, path, sizeof path, &st)) return 0;
  uint64_t at;
  if (positional) {
    at = (uint64_t)off;
  } else if (fcntl(fd, F_GETFL) & O_APPEND) {
    at = (uint64_t)st.st_size;
  } else {
    off_t cur = lseek(fd, 0, SEEK_CUR);
    if (cur < 0) return 0;
    at = (uint64_t)cur;
  }
  record('W', fd, path, &st, at, len);
  return 1;
}

static int note_truncate(int fd, off_t len) {
  char path[4096];
  struct stat st;
  if (!tracked(fd, path, sizeof path, &st)) return 0;
  uint64_t n = (uint64_t)len;
  record('T', fd, path, &st, n, (uint64_t)st.st_size > n ? (uint64_t)st.st_size - n : 0);
  return 1;
}

static uint64_t syncs;

/* Logs the start of a sync ('B') and returns its token (0: the file is not tracked). */
static uint64_t note_sync(int fd, char kind, uint64_t token) {
  char path[4096];
  struct stat st;
  if (!tracked(fd, path, sizeof path, &st)) return 0;
  if (kind == 'B') token = ++syncs;
  uint16_t plen = (uint16_t)strlen(path);
  out(&kind, 1);
  out_u64((uint64_t)st.st_dev);
  out_u64((uint64_t)st.st_ino);
  out(&plen, 2);
  out(path, plen);
  out_u64(token);
  out_u64((uint64_t)st.st_size);
  out_u64(0);
  out_u64(0);
  return token;
}

ssize_t write(int fd, const void *buf, size_t n) {
  pthread_mutex_lock(&lock);
  int logged = note_write(fd, 0, n, 0);
  ssize_t r = real_write(fd, buf, n);
  counted(logged);
  pthread_mutex_unlock(&lock);
  return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  pthread_mutex_lock(&lock);
  int logged = note_write(fd, off, n, 1);
  ssize_t r = real_pwrite(fd, buf, n, off);
  counted(logged);
  pthread_mutex_unlock(&lock);
  return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
  pthread_mutex_lock(&lock);
  int logged = note_write(fd, off, n, 1);
  ssize_t r = real_pwrite64(fd, buf, n, off);
  counted(logged);
  pthread_mutex_unlock(&lock);
  return r;
}

int ftruncate(int fd, off_t len) {
  pthread_mutex_lock(&lock);
  int logged = note_truncate(fd, len);
  int r = real_ftruncate(fd, len);
  counted(logged);
  pthread_mutex_unlock(&lock);
  return r;
}

int ftruncate64(int fd, off_t len) {
  pthread_mutex_lock(&lock);
  int logged = note_truncate(fd, len);
  int r = real_ftruncate64(fd, len);
  counted(logged);
  pthread_mutex_unlock(&lock);
  return r;
}

/* A sync logs 'B' before it starts and 'S' (same token) once it succeeded. Writes
 * logged before the 'B' are on disk after the 'S'; writes that raced with the sync may
 * or may not be, so the test treats them as lost. The lock is not held during the sync
 * itself, so the shim does not serialise the store's writes behind its fsyncs. */
static int synced(int fd, int (*real)(int)) {
  pthread_mutex_lock(&lock);
  uint64_t token = note_sync(fd, 'B', 0);
  pthread_mutex_unlock(&lock);
  int r = real(fd);
  if (r == 0 && token != 0) {
    pthread_mutex_lock(&lock);
    note_sync(fd, 'S', token);
    pthread_mutex_unlock(&lock);
  }
  return r;
}

int fsync(int fd) { return synced(fd, real_fsync); }

int fdatasync(int fd) { return synced(fd, real_fdatasync); }
