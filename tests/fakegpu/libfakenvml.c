/*
 * libfakenvml.c - stand-in libnvidia-ml.so.1 for machines without a GPU.
 *
 * Compiled against NVIDIA's own nvml.h so every struct and enum is exact.
 * Only functions that gpudash / pynvml / nvitop / gpustat use are exported;
 * pynvml resolves symbols lazily and raises NVMLError_FunctionNotFound for
 * the rest, which is exactly what an older driver lacking them does.
 *
 * Where the data comes from: see fakegpu.h (state directory layout).
 *
 * Holder liveness design ("who holds memory, and when did it die"):
 *   - A holder (fakegpu hold, or fakegpu_hold() from any process) creates an
 *     empty file holders/h.<pid>.<starttime>.<seq>.0.<allocs>, then starts a
 *     tiny watcher process (`fakegpu __watch`, setsid, double-forked so nobody
 *     has to reap it) holding the read end of a pipe whose write end only the
 *     holder has. The kernel closes the write end the instant the holder
 *     exits (also if SIGKILLed or if it becomes a zombie), so the watcher's
 *     read() returns EOF at the exact death time even if nobody queries.
 *     The watcher renames the file to d.<...>.<death_ns>.<allocs> (atomic)
 *     and unlinks it after the teardown delay. A stopped (T) holder keeps its
 *     pipe open and therefore keeps holding. Forked children never keep the
 *     pipe (a pthread_atfork handler closes it in them; exec closes it too), so
 *     EOF is the death of the holder process itself.
 *   - Memory outlives the holder while its device files stay open elsewhere
 *     (a child forked from a CUDA process inherits /dev/nvidia* and keeps the
 *     memory; NVML never lists that child). A holder opens dev/nvidiactl,
 *     dev/nvidia-uvm and dev/nvidia<N> like CUDA and takes an OFD write lock
 *     on its own byte of dev/nvidiactl (fg_client_key), and maps it: the lock
 *     belongs to the open file description, is shared by every fork, and goes
 *     away only when the last fd or mapping of it does. On EOF the watcher
 *     tries a read lock on that byte: if it is taken, the entry becomes
 *     o.* (detached: not listed, still used) and the watcher blocks in
 *     F_OFD_SETLKW until the last copy is closed, which is the death time.
 *   - Fallback if a watcher was killed: readers verify each entry the first
 *     time they see it (/proc/PID/stat: exists, state not Z/X, field 22
 *     starttime matches, so a recycled pid never inherits memory) and once a
 *     second probe a rotating window of 64 entries (kill(pid,0), every 8th
 *     with the full /proc check), so such a death is noticed within
 *     ~N/64 seconds; a dead one is renamed to d.* with "first observed
 *     dead" as death time (or o.* if the device files are still open, see
 *     above; o.* entries are probed the same way with F_OFD_GETLK).  Readers
 *     also unlink expired d.* entries.
 *   - Readers cache one readdir snapshot per process and rescan only when
 *     the holders directory changes (mtime/inode; rescans again while the
 *     mtime is too recent to trust, because fs timestamps are coarse).
 *     Teardown expiry is evaluated against the clock on every call, so
 *     release timing does not depend on rescans.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakegpu.h"

#define EXPORT __attribute__((visibility("default")))
#define FG_MAX_ALLOCS 16 /* GPUs one holder entry may name */

/* ------------------------------------------------------------------ utils */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void copy_str(char *dst, unsigned len, const char *src)
{
    if (!len)
        return;
    snprintf(dst, len, "%s", src);
}

EXPORT const char *fakegpu_state_dir(void)
{
    const char *d = getenv("FAKEGPU_STATE");
    return (d && *d) ? d : NULL;
}

/* ------------------------------------------------------- config key table */

typedef enum { T_STR, T_UINT, T_ULL, T_HEX } ftype;
typedef struct {
    const char *key;
    ftype type;
    size_t off;
    size_t size;
} fdesc;

#define G(k, t, f) {k, t, offsetof(fg_gpu, f), sizeof(((fg_gpu *)0)->f)}
static const fdesc gpu_fields[] = {
    G("name", T_STR, name), G("uuid", T_STR, uuid), G("serial", T_STR, serial),
    G("total_mib", T_ULL, total_mib), G("baseline_mib", T_ULL, baseline_mib),
    G("reserved_mib", T_ULL, reserved_mib), G("util_gpu", T_UINT, util_gpu),
    G("util_mem", T_UINT, util_mem), G("temp", T_UINT, temp), G("fan", T_UINT, fan),
    G("pstate", T_UINT, pstate), G("power_mw", T_UINT, power_mw),
    G("power_limit_mw", T_UINT, power_limit_mw), G("clk_graphics", T_UINT, clk_graphics),
    G("clk_sm", T_UINT, clk_sm), G("clk_mem", T_UINT, clk_mem), G("clk_video", T_UINT, clk_video),
    G("max_graphics", T_UINT, max_graphics), G("max_sm", T_UINT, max_sm),
    G("max_mem", T_UINT, max_mem), G("max_video", T_UINT, max_video),
    G("pci_domain", T_HEX, pci_domain), G("pci_bus", T_HEX, pci_bus),
    G("pci_device", T_HEX, pci_device), G("pci_devid", T_HEX, pci_devid),
    G("pci_subsys", T_HEX, pci_subsys), G("lost", T_UINT, lost), G("noperm", T_UINT, noperm),
    G("procmem_na", T_UINT, procmem_na), G("unsupported", T_HEX, unsupported),
    G("leak_mib", T_ULL, leak_mib), G("mig", T_UINT, mig), G("display", T_UINT, display),
    G("persistence_off", T_UINT, persistence_off),
};
#undef G
#define S(k, t, f) {k, t, offsetof(fg_state, f), sizeof(((fg_state *)0)->f)}
static const fdesc sys_fields[] = {
    S("driver_version", T_STR, driver_version), S("nvml_version", T_STR, nvml_version),
    S("cuda_version", T_UINT, cuda_version), S("teardown_ms", T_UINT, teardown_ms),
    S("slow_ms", T_UINT, slow_ms),
};
#undef S
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const field_names[] = {"power", "power_limit", "temperature", "utilization",
                                          "fan", "clocks", "pstate", "memory", "processes",
                                          "serial", "process_util"};

EXPORT int fakegpu_field_bit(const char *name)
{
    for (unsigned i = 0; i < NELEM(field_names); i++)
        if (!strcmp(name, field_names[i]))
            return 1 << i;
    return 0;
}

EXPORT const char *fakegpu_field_names(void)
{
    return "power,power_limit,temperature,utilization,fan,clocks,pstate,memory,processes,serial,"
           "process_util";
}

static int set_field(void *base, const fdesc *f, const char *v)
{
    char *end;
    void *p = (char *)base + f->off;
    switch (f->type) {
    case T_STR:
        copy_str(p, (unsigned)f->size, v);
        return 0;
    case T_UINT:
    case T_HEX: {
        unsigned long x = strtoul(v, &end, f->type == T_HEX ? 16 : 10);
        if (end == v || *end)
            return -1;
        *(unsigned *)p = (unsigned)x;
        return 0;
    }
    case T_ULL: {
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end)
            return -1;
        *(unsigned long long *)p = x;
        return 0;
    }
    }
    return -1;
}

static void put_field(FILE *f, const char *prefix, const void *base, const fdesc *d)
{
    const void *p = (const char *)base + d->off;
    switch (d->type) {
    case T_STR: fprintf(f, "%s%s=%s\n", prefix, d->key, (const char *)p); break;
    case T_UINT: fprintf(f, "%s%s=%u\n", prefix, d->key, *(const unsigned *)p); break;
    case T_HEX: fprintf(f, "%s%s=%x\n", prefix, d->key, *(const unsigned *)p); break;
    case T_ULL: fprintf(f, "%s%s=%llu\n", prefix, d->key, *(const unsigned long long *)p); break;
    }
}

/* Set "key" (global) or gpu field; gpu<0 means the global table. */
EXPORT int fakegpu_state_set(fg_state *s, int gpu, const char *key, const char *value)
{
    if (gpu < 0) {
        for (unsigned i = 0; i < NELEM(sys_fields); i++)
            if (!strcmp(key, sys_fields[i].key))
                return set_field(s, &sys_fields[i], value);
        return -1;
    }
    if ((unsigned)gpu >= FG_MAX_GPUS)
        return -1;
    for (unsigned i = 0; i < NELEM(gpu_fields); i++)
        if (!strcmp(key, gpu_fields[i].key))
            return set_field(&s->g[gpu], &gpu_fields[i], value);
    return -1;
}

/* Realistic defaults for an 8-way HGX-like box. */
EXPORT void fakegpu_state_defaults(fg_state *s, unsigned ngpus, const char *name,
                                   unsigned long long total_mib)
{
    static const unsigned buses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
    memset(s, 0, sizeof(*s));
    if (ngpus > FG_MAX_GPUS)
        ngpus = FG_MAX_GPUS;
    s->ngpus = ngpus;
    copy_str(s->driver_version, sizeof s->driver_version, "580.95.05");
    copy_str(s->nvml_version, sizeof s->nvml_version, "13.580.95.05");
    s->cuda_version = 13000;
    s->teardown_ms = 1000;
    for (unsigned i = 0; i < ngpus; i++) {
        fg_gpu *g = &s->g[i];
        copy_str(g->name, sizeof g->name, name ? name : "NVIDIA H100 80GB HBM3");
        /* deterministic, well-formed UUIDs: GPU-8-4-4-4-12 hex */
        unsigned h = 0x9e3779b9u * (i + 1);
        snprintf(g->uuid, sizeof g->uuid, "GPU-%08x-%04x-%04x-%04x-%08x%04x", h ^ 0x5eed1234u,
                 (h >> 8) & 0xffff, 0x4000 | (i & 0xfff), 0x8000 | ((h >> 4) & 0x3fff),
                 h * 2654435761u, i);
        snprintf(g->serial, sizeof g->serial, "16542300%05u", 17 + i);
        g->total_mib = total_mib ? total_mib : 81559;
        g->temp = 30 + i % 8;
        g->fan = 0;
        g->unsupported = FG_F_FAN; /* datacenter GPUs report fan speed as N/A */
        g->power_mw = 70000 + 1000 * (i % 8);
        g->power_limit_mw = 700000;
        g->clk_graphics = 345, g->clk_sm = 345, g->clk_mem = 2619, g->clk_video = 765;
        g->max_graphics = 1980, g->max_sm = 1980, g->max_mem = 2619, g->max_video = 1545;
        g->pci_domain = 0;
        g->pci_bus = i < NELEM(buses) ? buses[i] : 0xe0 + (i - NELEM(buses));
        g->pci_device = 0;
        g->pci_devid = 0x233010de;
        g->pci_subsys = 0x16c110de;
    }
}

EXPORT int fakegpu_state_load(const char *dir, fg_state *s)
{
    char path[PATH_MAX], line[512];
    if (!dir) {
        errno = ENOENT;
        return -1;
    }
    snprintf(path, sizeof path, "%s/config", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    memset(s, 0, sizeof(*s));
    while (fgets(line, sizeof line, f)) {
        char *nl = strchr(line, '\n'), *eq = strchr(line, '=');
        if (nl)
            *nl = 0;
        if (!eq)
            continue;
        *eq = 0;
        const char *k = line, *v = eq + 1;
        if (!strncmp(k, "gpu", 3) && isdigit((unsigned char)k[3])) {
            char *dot;
            unsigned long i = strtoul(k + 3, &dot, 10);
            if (*dot == '.' && i < FG_MAX_GPUS)
                fakegpu_state_set(s, (int)i, dot + 1, v);
        } else if (!strcmp(k, "gpus")) {
            s->ngpus = (unsigned)strtoul(v, NULL, 10);
            if (s->ngpus > FG_MAX_GPUS)
                s->ngpus = FG_MAX_GPUS;
        } else {
            fakegpu_state_set(s, -1, k, v);
        }
    }
    fclose(f);
    return 0;
}

static void dev_path(const char *dir, const char *name, char *buf, size_t len);

/* dev/nvidiactl, dev/nvidia-uvm, dev/nvidia<N>: created once and never replaced, since
 * holders' locks live on these very inodes. One page long so that they can be mapped. */
static void make_dev_files(const char *dir, unsigned ngpus)
{
    char path[PATH_MAX], name[32];
    dev_path(dir, "", path, sizeof path);
    mkdir(path, 0777);
    for (unsigned i = 0; i < ngpus + 2; i++) {
        if (i == 0)
            snprintf(name, sizeof name, "nvidiactl");
        else if (i == 1)
            snprintf(name, sizeof name, "nvidia-uvm");
        else
            snprintf(name, sizeof name, "nvidia%u", i - 2);
        dev_path(dir, name, path, sizeof path);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0)
            continue; /* exists already (or cannot be made: holds then work without) */
        if (fchmod(fd, 0666) || ftruncate(fd, 4096)) {
        }
        close(fd);
    }
}

EXPORT int fakegpu_state_save(const char *dir, const fg_state *s)
{
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/holders", dir);
    mkdir(path, 0777);
    make_dev_files(dir, s->ngpus);
    snprintf(path, sizeof path, "%s/config", dir);
    snprintf(tmp, sizeof tmp, "%s/.config.tmp.%d", dir, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -1;
    fprintf(f, "# fakegpu state (tests/fakegpu); edit with `fakegpu set|fault`\n");
    fprintf(f, "gpus=%u\n", s->ngpus);
    for (unsigned i = 0; i < NELEM(sys_fields); i++)
        put_field(f, "", s, &sys_fields[i]);
    for (unsigned g = 0; g < s->ngpus; g++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "gpu%u.", g);
        for (unsigned i = 0; i < NELEM(gpu_fields); i++)
            put_field(f, prefix, &s->g[g], &gpu_fields[i]);
    }
    if (fflush(f) || fsync(fileno(f))) {
        fclose(f);
        unlink(tmp);
        return -1;
    }
    fclose(f);
    return rename(tmp, path); /* atomic: readers see old or new, never half */
}

EXPORT int fakegpu_state_lock(const char *dir)
{
    char path[PATH_MAX];
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0)
        while (flock(fd, LOCK_EX) == -1 && errno == EINTR) {
        }
    return fd;
}

EXPORT void fakegpu_state_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* releases the flock */
}

EXPORT void fakegpu_bus_id_legacy(const fg_gpu *g, char *buf, unsigned len)
{
    snprintf(buf, len, "%04X:%02X:%02X.0", g->pci_domain, g->pci_bus, g->pci_device);
}

/* ------------------------------------------------------------ /proc utils */

/* Read state char and starttime (field 22) of pid in the procfs at root. 0 or -1. */
static int proc_stat_at(const char *root, unsigned pid, char *state, unsigned long long *start)
{
    char path[320], buf[1024];
    snprintf(path, sizeof path, "%s/%u/stat", root, pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* comm may contain spaces and ')' */
    if (!p || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* p points at field 3; skip to field 22 */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

static int proc_stat(unsigned pid, char *state, unsigned long long *start)
{
    return proc_stat_at("/proc", pid, state, start);
}

/* This process's pid and start time as the driver's readers see them. The real driver
 * reports host PIDs whatever PID namespace a process is in (a container's): with
 * $FAKEGPU_HOST_PROC naming the host's procfs mounted inside the container, its "self"
 * link gives this process's pid in the host's namespace. */
static int self_identity(unsigned *pid, char *state, unsigned long long *start)
{
    const char *root = getenv("FAKEGPU_HOST_PROC");
    if (root && *root) {
        char link[300], buf[32];
        snprintf(link, sizeof link, "%s/self", root);
        ssize_t n = readlink(link, buf, sizeof buf - 1);
        if (n <= 0)
            return -1;
        buf[n] = 0;
        *pid = (unsigned)strtoul(buf, NULL, 10);
        return proc_stat_at(root, *pid, state, start);
    }
    *pid = (unsigned)getpid();
    return proc_stat(*pid, state, start);
}

/* alive = exists, same start time, not a zombie */
static int proc_alive(unsigned pid, unsigned long long start)
{
    char st;
    unsigned long long s;
    if (proc_stat(pid, &st, &s))
        return 0;
    return s == start && st != 'Z' && st != 'X' && st != 'x';
}

EXPORT int fakegpu_process_name(unsigned pid, char *buf, unsigned len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    char tmp[1024];
    ssize_t n = read(fd, tmp, sizeof tmp - 1);
    close(fd);
    if (n <= 0 || !tmp[0]) { /* kernel thread or unreadable: fall back to comm */
        snprintf(path, sizeof path, "/proc/%u/comm", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return errno;
        n = read(fd, tmp, sizeof tmp - 1);
        close(fd);
        if (n <= 0)
            return EIO;
        if (tmp[n - 1] == '\n')
            n--;
    }
    tmp[n] = 0; /* argv[0] ends at the first NUL */
    copy_str(buf, len, tmp);
    return 0;
}

/* -------------------------------------------------------- holder registry */

typedef struct {
    unsigned pid, seq;
    unsigned long long start;
    long long death_ns; /* 0 while alive */
    int detached;       /* o.*: holder dead, its device files still open somewhere */
    unsigned n;
    unsigned char gpu[FG_MAX_ALLOCS];
    unsigned long long mib[FG_MAX_ALLOCS];
    int verified; /* full /proc check done by this process */
    char name[NAME_MAX + 1];
} fg_entry;

static int parse_entry(const char *name, fg_entry *e)
{
    char kind;
    int off = 0;
    memset(e, 0, sizeof *e);
    if (sscanf(name, "%c.%u.%llu.%u.%lld.%n", &kind, &e->pid, &e->start, &e->seq, &e->death_ns,
               &off) != 5 || !off || (kind != 'h' && kind != 'o' && kind != 'd'))
        return -1;
    if ((kind == 'd') != (e->death_ns != 0))
        return -1;
    e->detached = kind == 'o';
    const char *p = name + off;
    while (*p && e->n < FG_MAX_ALLOCS) {
        unsigned g;
        unsigned long long m;
        int used = 0;
        if (sscanf(p, "%u:%llu%n", &g, &m, &used) != 2 || g >= FG_MAX_GPUS)
            return -1;
        e->gpu[e->n] = (unsigned char)g;
        e->mib[e->n++] = m;
        p += used;
        if (*p == '_')
            p++;
        else if (*p)
            return -1;
    }
    copy_str(e->name, sizeof e->name, name);
    return 0;
}

static void format_entry(const fg_entry *e, char *buf, size_t len)
{
    char kind = e->death_ns ? 'd' : e->detached ? 'o' : 'h';
    int k = snprintf(buf, len, "%c.%u.%llu.%u.%lld.", kind, e->pid, e->start, e->seq,
                     e->death_ns);
    for (unsigned i = 0; i < e->n && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, "%s%u:%llu", i ? "_" : "", e->gpu[i], e->mib[i]);
}

/* Move an entry to its next state (h -> o -> d, atomic renames; losers get ENOENT).
 * Another process may have moved it already (h -> o), so both earlier names are tried. */
static void move_entry(const char *hdir, fg_entry *e, int detached, long long death)
{
    char from[PATH_MAX + NAME_MAX + 2], to[PATH_MAX + NAME_MAX + 2], nm[NAME_MAX + 1];
    fg_entry t = *e;
    t.detached = detached, t.death_ns = death;
    format_entry(&t, nm, sizeof nm);
    snprintf(to, sizeof to, "%s/%s", hdir, nm);
    snprintf(from, sizeof from, "%s/%s", hdir, e->name);
    if (rename(from, to) && errno == ENOENT && !e->death_ns) {
        t.death_ns = 0;
        t.detached = !e->detached; /* the other live name */
        char other[NAME_MAX + 1];
        format_entry(&t, other, sizeof other);
        snprintf(from, sizeof from, "%s/%s", hdir, other);
        rename(from, to);
    }
    e->detached = detached, e->death_ns = death;
    copy_str(e->name, sizeof e->name, nm);
}

/* Byte of dev/nvidiactl a holder locks: unique per (pid, start time, seq) among live
 * holders (a pid is < 2^22; start times of one pid equal mod 2^24 ticks only ~46 h
 * apart), and < 2^62 so it fits off_t. */
static off_t fg_client_key(const fg_entry *e)
{
    return (off_t)(((unsigned long long)e->pid << 40) | ((e->start & 0xffffffULL) << 16) |
                   (e->seq & 0xffffU));
}

static void dev_path(const char *dir, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/dev/%s", dir, name);
}

/* Is the holder's client (its dev/nvidiactl description) still open anywhere?
 * `ctl` is a descriptor of dev/nvidiactl, or -1 (no device files: never held). */
static int client_open(int ctl, const fg_entry *e)
{
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = fg_client_key(e),
                       .l_len = 1};
    if (ctl < 0 || fcntl(ctl, F_OFD_GETLK, &fl))
        return 0;
    return fl.l_type != F_UNLCK;
}

static int open_ctl(const char *dir)
{
    char path[PATH_MAX];
    dev_path(dir, "nvidiactl", path, sizeof path);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* A dead holder: detached while a child still holds its device files, else dead now. */
static void settle_dead(const char *hdir, int ctl, fg_entry *e, long long now)
{
    if (client_open(ctl, e))
        move_entry(hdir, e, 1, 0);
    else
        move_entry(hdir, e, 0, now);
}

/* Watcher: block on the pipe until the holder dies, then record the death. */
EXPORT int fakegpu_watch_main(int fd, const char *dir, const char *entry)
{
    char hdir[PATH_MAX], buf[64];
    fg_entry e;
    setsid(); /* survive killpg() of the holder's group and terminal signals */
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, "fakegpu-watch", 0, 0, 0);
    int devnull = open("/dev/null", O_RDWR);
    for (int i = 0; i < 3; i++)
        if (devnull >= 0 && devnull != i)
            dup2(devnull, i);
    for (int i = 3; i < 1024; i++) /* do not keep e.g. a test's stdout pipe open */
        if (i != fd)
            close(i);
    if (parse_entry(entry, &e))
        return 2;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR))
            break; /* EOF: every copy of the write end is closed -> holder is gone */
    }
    long long death = now_ns();
    snprintf(hdir, sizeof hdir, "%s/holders", dir);
    /* A read lock on the holder's byte is granted once no copy of its client is left;
     * our own read lock never looks "held" to readers, who test for a read lock too. */
    int ctl = open_ctl(dir);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = fg_client_key(&e),
                       .l_len = 1};
    if (ctl >= 0 && fcntl(ctl, F_OFD_SETLK, &fl) == -1 && (errno == EAGAIN || errno == EACCES)) {
        move_entry(hdir, &e, 1, 0); /* a forked child keeps the device files: detached */
        while (fcntl(ctl, F_OFD_SETLKW, &fl) == -1 && errno == EINTR) {
        }
        death = now_ns();
    }
    if (ctl >= 0)
        close(ctl);
    move_entry(hdir, &e, 0, death);
    fg_state s;
    unsigned teardown = 1000;
    if (!fakegpu_state_load(dir, &s))
        teardown = s.teardown_ms;
    sleep_ms(teardown + 50);
    /* re-read: teardown may have been changed meanwhile; readers are authoritative anyway */
    if (!fakegpu_state_load(dir, &s) && s.teardown_ms > teardown) {
        sleep_ms(s.teardown_ms - teardown);
    }
    char path[PATH_MAX + NAME_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", hdir, e.name);
    unlink(path);
    return 0;
}

/* Path of the `fakegpu` binary that sits next to this library. */
static int watcher_path(char *buf, size_t len)
{
    const char *env = getenv("FAKEGPU_BIN");
    if (env && *env) {
        copy_str(buf, (unsigned)len, env);
        return 0;
    }
    Dl_info info;
    if (!dladdr((void *)&watcher_path, &info) || !info.dli_fname)
        return -1;
    char lib[PATH_MAX];
    if (!realpath(info.dli_fname, lib))
        copy_str(lib, sizeof lib, info.dli_fname);
    char *slash = strrchr(lib, '/');
    if (!slash)
        return -1;
    *slash = 0;
    snprintf(buf, len, "%s/fakegpu", lib);
    return access(buf, X_OK);
}

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;

/* What this process holds: the write ends of its watchers' pipes (the holder process's
 * own life) and its device-file fds (the memory's life, shared with forked children). */
static pthread_mutex_t fds_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int *pipe_fds, *dev_fds;
static unsigned n_pipe_fds, n_dev_fds, cap_pipe_fds, cap_dev_fds;

static void remember_fd(int **arr, unsigned *n, unsigned *cap, int fd)
{
    if (*n == *cap) {
        unsigned c = *cap ? *cap * 2 : 16;
        int *a = realloc(*arr, c * sizeof(int));
        if (!a)
            return;
        *arr = a, *cap = c;
    }
    (*arr)[(*n)++] = fd;
}

static void atfork_prepare(void) { pthread_mutex_lock(&fds_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&fds_lock); }

/* In a forked child: the holder is not this process, so the child must not keep the
 * pipe that tells the watcher the holder is alive. Device fds are inherited as usual. */
static void atfork_child(void)
{
    for (unsigned i = 0; i < n_pipe_fds; i++)
        close(pipe_fds[i]);
    n_pipe_fds = 0;
    pthread_mutex_unlock(&fds_lock);
}

static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

EXPORT int fakegpu_keep_across_exec(void)
{
    int rc = 0;
    pthread_mutex_lock(&fds_lock);
    for (unsigned i = 0; i < n_dev_fds; i++)
        if (fcntl(dev_fds[i], F_SETFD, 0))
            rc = -1;
    pthread_mutex_unlock(&fds_lock);
    return rc;
}

/* Open (and map) the device files a CUDA context keeps open, and lock this holder's
 * byte of dev/nvidiactl. The fds stay open for the rest of the process's life. Returns
 * 0, or -1 if the state has no device files (an old state dir: memory then dies with
 * the holder, as before). */
static int open_device_files(const char *dir, const fg_entry *e)
{
    char path[PATH_MAX], name[32];
    int fds[FG_MAX_ALLOCS + 2], n = 0;
    dev_path(dir, "nvidiactl", path, sizeof path);
    int ctl = open(path, O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return -1;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = fg_client_key(e),
                       .l_len = 1};
    if (fcntl(ctl, F_OFD_SETLK, &fl)) {
        close(ctl);
        return -1;
    }
    fds[n++] = ctl;
    dev_path(dir, "nvidia-uvm", path, sizeof path);
    int uvm = open(path, O_RDWR | O_CLOEXEC);
    if (uvm >= 0)
        fds[n++] = uvm;
    for (unsigned i = 0; i < e->n; i++) {
        snprintf(name, sizeof name, "nvidia%u", e->gpu[i]);
        dev_path(dir, name, path, sizeof path);
        int g = open(path, O_RDWR | O_CLOEXEC);
        if (g >= 0)
            fds[n++] = g;
    }
    /* mapped like CUDA maps them: a child that closes every fd but keeps the mapping
     * (fork without exec) still holds the description, and with it the lock */
    for (int i = 0; i < n; i++)
        mmap(NULL, 4096, PROT_READ, MAP_SHARED, fds[i], 0);
    pthread_mutex_lock(&fds_lock);
    for (int i = 0; i < n; i++)
        remember_fd(&dev_fds, &n_dev_fds, &cap_dev_fds, fds[i]);
    pthread_mutex_unlock(&fds_lock);
    return 0;
}

EXPORT int fakegpu_hold_multi(const unsigned *gpus, const unsigned long long *mib, unsigned n)
{
    const char *dir = fakegpu_state_dir();
    char hdir[PATH_MAX], nm[NAME_MAX + 1], path[PATH_MAX + NAME_MAX + 2], bin[PATH_MAX];
    static unsigned seq;
    fg_entry e;
    char st;
    if (!dir || n == 0 || n > FG_MAX_ALLOCS) {
        errno = EINVAL;
        return -1;
    }
    if (watcher_path(bin, sizeof bin)) {
        errno = ENOENT;
        return -1;
    }
    pthread_once(&atfork_once, register_atfork);
    memset(&e, 0, sizeof e);
    if (self_identity(&e.pid, &st, &e.start))
        return -1;
    for (unsigned i = 0; i < n; i++) {
        if (gpus[i] >= FG_MAX_GPUS) {
            errno = EINVAL;
            return -1;
        }
        e.gpu[i] = (unsigned char)gpus[i];
        e.mib[i] = mib[i];
    }
    e.n = n;
    pthread_mutex_lock(&hold_lock);
    e.seq = seq++;
    pthread_mutex_unlock(&hold_lock);
    /* before the entry exists, so that any reader who sees it can test the lock */
    open_device_files(dir, &e);
    format_entry(&e, nm, sizeof nm);
    snprintf(hdir, sizeof hdir, "%s/holders", dir);
    mkdir(dir, 0777);
    mkdir(hdir, 0777);
    snprintf(path, sizeof path, "%s/%s", hdir, nm);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    close(fd);

    int p[2];
    if (pipe2(p, O_CLOEXEC)) {
        unlink(path);
        return -1;
    }
    /* Everything exec needs is prepared before fork (the caller may be threaded). */
    char *argv[] = {"fakegpu-watch", "__watch", (char *)dir, nm, NULL};
    pid_t child = fork();
    if (child < 0) {
        close(p[0]), close(p[1]), unlink(path);
        return -1;
    }
    if (child == 0) {
        /* double fork: the watcher is re-parented, the caller never reaps it */
        if (fork() == 0) {
            close(p[1]);
            /* fd 3 must be the read end WITHOUT close-on-exec (dup2 onto itself keeps it) */
            if (p[0] == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(p[0], 3) < 0)
                _exit(127);
            execv(bin, argv);
            _exit(127);
        }
        _exit(0);
    }
    while (waitpid(child, NULL, 0) == -1 && errno == EINTR) {
    }
    close(p[0]);
    /* p[1] is intentionally kept open for the rest of this process's life (not in its
     * forked children: see atfork_child). */
    pthread_mutex_lock(&fds_lock);
    remember_fd(&pipe_fds, &n_pipe_fds, &cap_pipe_fds, p[1]);
    pthread_mutex_unlock(&fds_lock);
    return 0;
}

EXPORT int fakegpu_hold(unsigned gpu, unsigned long long mib)
{
    return fakegpu_hold_multi(&gpu, &mib, 1);
}

/* ------------------------------------------------ per-process snapshot cache */

typedef struct {
    const char *dir;
    fg_state st;
    /* config cache key */
    dev_t cfg_dev;
    ino_t cfg_ino;
    struct timespec cfg_mtim;
    off_t cfg_size;
    int cfg_ok;
    /* holders snapshot */
    fg_entry *ent;
    unsigned nent, cap;
    struct timespec h_mtim;
    ino_t h_ino;
    int h_valid, h_racy;
    long long last_probe_ns;
    unsigned probe_cursor;
    /* derived per-gpu data (alive holders only; detached ones are used, never listed) */
    unsigned long long alive_mib[FG_MAX_GPUS], detached_mib[FG_MAX_GPUS];
    unsigned ndetached[FG_MAX_GPUS];
    fg_proc *procs[FG_MAX_GPUS];
    unsigned nprocs[FG_MAX_GPUS];
} fg_cache;

static fg_cache C;
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;

/* Reload config if the file changed (it is only ever replaced by rename). */
static int refresh_config(void)
{
    char path[PATH_MAX];
    struct stat sb;
    C.dir = fakegpu_state_dir();
    if (!C.dir)
        return -1;
    snprintf(path, sizeof path, "%s/config", C.dir);
    if (stat(path, &sb)) {
        C.cfg_ok = 0;
        return -1;
    }
    if (C.cfg_ok && sb.st_ino == C.cfg_ino && sb.st_dev == C.cfg_dev &&
        sb.st_size == C.cfg_size && sb.st_mtim.tv_sec == C.cfg_mtim.tv_sec &&
        sb.st_mtim.tv_nsec == C.cfg_mtim.tv_nsec)
        return 0;
    if (fakegpu_state_load(C.dir, &C.st)) {
        C.cfg_ok = 0;
        return -1;
    }
    C.cfg_ino = sb.st_ino, C.cfg_dev = sb.st_dev, C.cfg_size = sb.st_size;
    C.cfg_mtim = sb.st_mtim;
    C.cfg_ok = 1;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const fg_entry *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return 0;
}

static int cmp_proc(const void *a, const void *b)
{
    const fg_proc *x = a, *y = b;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static void rebuild_derived(void)
{
    for (unsigned g = 0; g < FG_MAX_GPUS; g++) {
        C.alive_mib[g] = C.detached_mib[g] = 0;
        C.nprocs[g] = C.ndetached[g] = 0;
    }
    unsigned cnt[FG_MAX_GPUS] = {0};
    for (unsigned i = 0; i < C.nent; i++) {
        const fg_entry *e = &C.ent[i];
        for (unsigned k = 0; k < e->n && !e->death_ns; k++) {
            if (e->detached) {
                C.detached_mib[e->gpu[k]] += e->mib[k];
                C.ndetached[e->gpu[k]]++;
            } else {
                cnt[e->gpu[k]]++;
            }
        }
    }
    for (unsigned g = 0; g < FG_MAX_GPUS; g++) {
        free(C.procs[g]);
        C.procs[g] = cnt[g] ? malloc(cnt[g] * sizeof(fg_proc)) : NULL;
    }
    for (unsigned i = 0; i < C.nent; i++) {
        const fg_entry *e = &C.ent[i];
        if (e->death_ns || e->detached)
            continue;
        for (unsigned k = 0; k < e->n; k++) {
            unsigned g = e->gpu[k];
            if (!C.procs[g])
                continue;
            C.alive_mib[g] += e->mib[k];
            C.procs[g][C.nprocs[g]++] = (fg_proc){e->pid, e->mib[k], e->start};
        }
    }
    /* entries are sorted by pid already; merge several holds of one process */
    for (unsigned g = 0; g < FG_MAX_GPUS; g++) {
        unsigned w = 0;
        qsort(C.procs[g], C.nprocs[g], sizeof(fg_proc), cmp_proc);
        for (unsigned r = 0; r < C.nprocs[g]; r++) {
            if (w && C.procs[g][w - 1].pid == C.procs[g][r].pid)
                C.procs[g][w - 1].mib += C.procs[g][r].mib;
            else
                C.procs[g][w++] = C.procs[g][r];
        }
        C.nprocs[g] = w;
    }
}

static void scan_holders(const char *hdir, const struct stat *sb)
{
    fg_entry *old = C.ent;
    unsigned nold = C.nent;
    DIR *d = opendir(hdir);
    C.ent = NULL, C.nent = 0, C.cap = 0;
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] != 'h' && de->d_name[0] != 'o' && de->d_name[0] != 'd')
                continue;
            if (C.nent == C.cap) {
                C.cap = C.cap ? C.cap * 2 : 256;
                C.ent = realloc(C.ent, C.cap * sizeof(fg_entry));
            }
            if (!parse_entry(de->d_name, &C.ent[C.nent]))
                C.nent++;
        }
        closedir(d);
    }
    qsort(C.ent, C.nent, sizeof(fg_entry), cmp_entry);
    long long now = now_ns();
    int ctl = -2; /* opened on first need */
    for (unsigned i = 0; i < C.nent; i++) {
        fg_entry *e = &C.ent[i];
        if (e->death_ns)
            continue;
        fg_entry *prev = nold ? bsearch(e, old, nold, sizeof(fg_entry), cmp_entry) : NULL;
        if (prev && prev->verified && !prev->death_ns && prev->detached == e->detached) {
            e->verified = 1;
            continue;
        }
        /* first sight: full check (also catches pid reuse and zombies); a detached
         * entry: are its device files still open somewhere? */
        if (e->detached || !proc_alive(e->pid, e->start)) {
            if (ctl == -2)
                ctl = open_ctl(C.dir);
            if (!e->detached)
                settle_dead(hdir, ctl, e, now);
            else if (!client_open(ctl, e))
                move_entry(hdir, e, 0, now);
        }
        e->verified = 1;
    }
    if (ctl >= 0)
        close(ctl);
    free(old);
    C.h_mtim = sb->st_mtim;
    C.h_ino = sb->st_ino;
    C.h_valid = 1;
    /* fs timestamps are coarse: a change in the same tick as our scan would be
     * invisible, so do not trust the snapshot while the mtime is this recent */
    long long mt = (long long)sb->st_mtim.tv_sec * 1000000000LL + sb->st_mtim.tv_nsec;
    C.h_racy = now - mt < 50000000LL;
    rebuild_derived();
}

/* Fallback liveness probe in case a watcher was killed (see header comment).
 * Bounded work per probe (a rotating window of entries) so that a dashboard
 * sampling once a second never pays for all holders at once. */
static void probe_holders(const char *hdir)
{
    long long now = now_ns();
    int changed = 0, ctl = -2;
    for (unsigned k = 0; k < 64 && k < C.nent; k++) {
        fg_entry *e = &C.ent[C.probe_cursor++ % C.nent];
        if (e->death_ns)
            continue;
        /* cheap kill(0) for most, full /proc check (zombie, pid reuse) for every 8th;
         * detached: the lock on the device file tells whether anyone still holds it */
        if (ctl == -2 && e->detached)
            ctl = open_ctl(C.dir);
        int dead = e->detached         ? !client_open(ctl, e)
                   : (k % 8 == 0) ? !proc_alive(e->pid, e->start)
                                  : (kill((pid_t)e->pid, 0) == -1 && errno == ESRCH);
        if (dead) {
            if (ctl == -2)
                ctl = open_ctl(C.dir);
            if (e->detached)
                move_entry(hdir, e, 0, now);
            else
                settle_dead(hdir, ctl, e, now);
            changed = 1;
        }
    }
    if (ctl >= 0)
        close(ctl);
    if (changed)
        rebuild_derived();
    C.last_probe_ns = now;
}

static void refresh_holders(void)
{
    char hdir[PATH_MAX];
    struct stat sb;
    snprintf(hdir, sizeof hdir, "%s/holders", C.dir);
    if (stat(hdir, &sb)) {
        memset(&sb, 0, sizeof sb);
    }
    if (!C.h_valid || C.h_racy || sb.st_ino != C.h_ino ||
        sb.st_mtim.tv_sec != C.h_mtim.tv_sec || sb.st_mtim.tv_nsec != C.h_mtim.tv_nsec)
        scan_holders(hdir, &sb);
    if (now_ns() - C.last_probe_ns > 1000000000LL)
        probe_holders(hdir);
}

/* Memory still held by holders that died less than teardown_ms ago. */
static unsigned long long tearing_mib(unsigned g, unsigned *ntearing)
{
    long long now = now_ns(), td = (long long)C.st.teardown_ms * 1000000LL;
    unsigned long long sum = 0;
    char hdir[PATH_MAX], path[PATH_MAX + NAME_MAX + 2];
    for (unsigned i = 0; i < C.nent; i++) {
        fg_entry *e = &C.ent[i];
        if (!e->death_ns)
            continue;
        if (now < e->death_ns + td) {
            for (unsigned k = 0; k < e->n; k++)
                if (e->gpu[k] == g) {
                    sum += e->mib[k];
                    if (ntearing)
                        (*ntearing)++;
                }
        } else if (now > e->death_ns + td + 2000000000LL) {
            /* the watcher should have removed it; garbage-collect */
            snprintf(hdir, sizeof hdir, "%s/holders", C.dir);
            snprintf(path, sizeof path, "%s/%s", hdir, e->name);
            unlink(path);
        }
    }
    return sum;
}

static unsigned long long used_mib(unsigned g)
{
    return C.st.g[g].baseline_mib + C.st.g[g].leak_mib + C.alive_mib[g] + C.detached_mib[g] +
           tearing_mib(g, NULL);
}

EXPORT int fakegpu_gpu_usage(unsigned gpu, unsigned long long *used, unsigned *nprocs,
                             unsigned *ntearing, unsigned *ndetached)
{
    pthread_mutex_lock(&api_lock);
    int rc = -1;
    if (!refresh_config() && gpu < C.st.ngpus) {
        refresh_holders();
        if (ntearing)
            *ntearing = 0;
        if (used)
            *used = C.st.g[gpu].baseline_mib + C.st.g[gpu].leak_mib + C.alive_mib[gpu] +
                    C.detached_mib[gpu] + tearing_mib(gpu, ntearing);
        if (nprocs)
            *nprocs = C.nprocs[gpu];
        if (ndetached)
            *ndetached = C.ndetached[gpu];
        rc = 0;
    }
    pthread_mutex_unlock(&api_lock);
    return rc;
}

/* ------------------------------------------------------------- NVML API */

struct nvmlDevice_st {
    unsigned index;
};
static struct nvmlDevice_st devs[FG_MAX_GPUS];

/* Common prologue: slow-call fault, lock, config refresh. Unlocks on error. */
static nvmlReturn_t enter(void)
{
    if (!init_count)
        return NVML_ERROR_UNINITIALIZED;
    /* slow fault applies to every call: sleep outside the lock */
    if (C.cfg_ok && C.st.slow_ms)
        sleep_ms(C.st.slow_ms);
    pthread_mutex_lock(&api_lock);
    if (refresh_config()) {
        pthread_mutex_unlock(&api_lock);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t r)
{
    pthread_mutex_unlock(&api_lock);
    return r;
}

/* Prologue for per-device calls; `field` is an FG_F_* bit or 0. */
static nvmlReturn_t enter_dev(nvmlDevice_t dev, fg_gpu **g, unsigned field)
{
    nvmlReturn_t r = enter();
    if (r)
        return r;
    if (!dev || dev < devs || dev >= devs + FG_MAX_GPUS || dev->index >= C.st.ngpus)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *g = &C.st.g[dev->index];
    if ((*g)->lost)
        return leave(NVML_ERROR_GPU_IS_LOST);
    if ((*g)->unsupported & field)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    return NVML_SUCCESS;
}

static nvmlReturn_t put_string(char *dst, unsigned len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&api_lock);
    for (unsigned i = 0; i < FG_MAX_GPUS; i++)
        devs[i].index = i;
    int bad = refresh_config();
    if (!bad)
        init_count++;
    pthread_mutex_unlock(&api_lock);
    /* no state dir == no kernel driver */
    return bad ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&api_lock);
    nvmlReturn_t r = NVML_ERROR_UNINITIALIZED;
    if (init_count > 0) {
        init_count--;
        r = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&api_lock);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t r = enter();
    return r ? r : leave(put_string(version, length, C.st.driver_version));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    nvmlReturn_t r = enter();
    return r ? r : leave(put_string(version, length, C.st.nvml_version));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    nvmlReturn_t r = enter();
    if (r)
        return r;
    if (!v)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *v = (int)C.st.cuda_version;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    nvmlReturn_t r = enter();
    if (r)
        return r;
    char buf[1024];
    int e = fakegpu_process_name(pid, buf, sizeof buf);
    if (e)
        return leave(e == EACCES ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_NOT_FOUND);
    if (!name || !length)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    copy_str(name, length, buf); /* real NVML truncates */
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    nvmlReturn_t r = enter();
    if (r)
        return r;
    if (!count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = C.st.ngpus;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t r = enter();
    if (r)
        return r;
    if (!device || index >= C.st.ngpus)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (C.st.g[index].lost)
        return leave(NVML_ERROR_GPU_IS_LOST);
    *device = &devs[index];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* find device by predicate over config; used by the ByUUID/ByPciBusId/BySerial lookups */
static nvmlReturn_t handle_by(int (*match)(const fg_gpu *, const char *), const char *key,
                              nvmlDevice_t *device)
{
    nvmlReturn_t r = enter();
    if (r)
        return r;
    if (!key || !device)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < C.st.ngpus; i++)
        if (match(&C.st.g[i], key)) {
            if (C.st.g[i].lost)
                return leave(NVML_ERROR_GPU_IS_LOST);
            *device = &devs[i];
            return leave(NVML_SUCCESS);
        }
    return leave(NVML_ERROR_NOT_FOUND);
}

static int match_uuid(const fg_gpu *g, const char *k) { return !strcmp(g->uuid, k); }
static int match_serial(const fg_gpu *g, const char *k) { return !strcmp(g->serial, k); }
static int match_bus(const fg_gpu *g, const char *k)
{
    /* accept "00000000:18:00.0", "0000:18:00.0", "18:00.0", case-insensitive */
    unsigned dom = 0, bus, dev, fn = 0;
    if (sscanf(k, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) < 3) {
        dom = 0;
        if (sscanf(k, "%x:%x.%x", &bus, &dev, &fn) < 2)
            return 0;
    }
    return dom == g->pci_domain && bus == g->pci_bus && dev == g->pci_device && fn == 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    return handle_by(match_uuid, uuid, device);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    return handle_by(match_serial, serial, device);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *device)
{
    return handle_by(match_bus, bus, device);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus, nvmlDevice_t *device)
{
    return handle_by(match_bus, bus, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    return r ? r : leave(put_string(name, length, g->name));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    return r ? r : leave(put_string(uuid, length, g->uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_SERIAL);
    return r ? r : leave(put_string(serial, length, g->serial));
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!index)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *index = d->index;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
    return nvmlDeviceGetIndex(d, minor);
}

static void fill_pci(const fg_gpu *g, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             g->pci_domain, g->pci_bus, g->pci_device);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, g->pci_domain,
             g->pci_bus, g->pci_device);
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_devid;
    pci->pciSubSystemId = g->pci_subsys;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    fill_pci(g, pci);
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

EXPORT nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t d, nvmlPciInfoExt_t *pci)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (pci->version != nvmlPciInfoExt_v1)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_devid;
    pci->pciSubSystemId = g->pci_subsys;
    pci->baseClass = 0x03;
    pci->subClass = 0x02; /* 3D controller */
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, g->pci_domain,
             g->pci_bus, g->pci_device);
    return leave(NVML_SUCCESS);
}

#define MIB 1048576ULL

/* v1: used = reserved + allocated (+ baseline); free = total - used */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *mem)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_MEMORY);
    if (r)
        return r;
    if (!mem)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    refresh_holders();
    unsigned long long total = g->total_mib * MIB;
    unsigned long long used = (g->reserved_mib + used_mib(d->index)) * MIB;
    if (used > total)
        used = total;
    mem->total = total, mem->used = used, mem->free = total - used;
    return leave(NVML_SUCCESS);
}

/* v2: reserved is separate; free = total - reserved - used */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *mem)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_MEMORY);
    if (r)
        return r;
    if (!mem)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (mem->version != nvmlMemory_v2)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    refresh_holders();
    unsigned long long total = g->total_mib * MIB, reserved = g->reserved_mib * MIB;
    if (reserved > total)
        reserved = total;
    unsigned long long used = used_mib(d->index) * MIB;
    if (used > total - reserved)
        used = total - reserved;
    mem->total = total, mem->reserved = reserved, mem->used = used;
    mem->free = total - reserved - used;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, nvmlBAR1Memory_t *bar1)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_MEMORY);
    if (r)
        return r;
    if (!bar1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    bar1->bar1Total = 128 * 1024 * MIB;
    bar1->bar1Used = 2 * MIB;
    bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_UTILIZATION);
    if (r)
        return r;
    if (!u)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    u->gpu = g->util_gpu, u->memory = g->util_mem;
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t codec_util(nvmlDevice_t d, unsigned *util, unsigned *period)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_UTILIZATION);
    if (r)
        return r;
    if (!util || !period)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *util = 0, *period = 167000;
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned *u, unsigned *p) { return codec_util(d, u, p); }
EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned *u, unsigned *p) { return codec_util(d, u, p); }

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t sensor,
                                             unsigned int *temp)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_TEMPERATURE);
    if (r)
        return r;
    if (!temp || sensor != NVML_TEMPERATURE_GPU)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *temp = g->temp;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t *t)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_TEMPERATURE);
    if (r)
        return r;
    if (!t || t->sensorType != NVML_TEMPERATURE_GPU)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (t->version != nvmlTemperature_v1)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    t->temperature = (int)g->temp;
    return leave(NVML_SUCCESS);
}

#define UINT_GETTER(fn, field_bit, expr)                                   \
    EXPORT nvmlReturn_t fn(nvmlDevice_t d, unsigned int *out)             \
    {                                                                     \
        fg_gpu *g;                                                        \
        nvmlReturn_t r = enter_dev(d, &g, field_bit);                     \
        if (r)                                                            \
            return r;                                                     \
        if (!out)                                                         \
            return leave(NVML_ERROR_INVALID_ARGUMENT);                    \
        *out = (expr);                                                    \
        return leave(NVML_SUCCESS);                                       \
    }

UINT_GETTER(nvmlDeviceGetPowerUsage, FG_F_POWER, g->power_mw)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, FG_F_POWER_LIMIT, g->power_limit_mw)
UINT_GETTER(nvmlDeviceGetPowerManagementLimit, FG_F_POWER_LIMIT, g->power_limit_mw)
UINT_GETTER(nvmlDeviceGetFanSpeed, FG_F_FAN, g->fan)

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, nvmlPstates_t *p)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_PSTATE);
    if (r)
        return r;
    if (!p)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *p = (nvmlPstates_t)g->pstate;
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t d, nvmlPstates_t *p) { return nvmlDeviceGetPerformanceState(d, p); }

static nvmlReturn_t get_clock(nvmlDevice_t d, nvmlClockType_t type, unsigned *clk, int max)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_CLOCKS);
    if (r)
        return r;
    if (!clk)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    switch (type) {
    case NVML_CLOCK_GRAPHICS: *clk = max ? g->max_graphics : g->clk_graphics; break;
    case NVML_CLOCK_SM: *clk = max ? g->max_sm : g->clk_sm; break;
    case NVML_CLOCK_MEM: *clk = max ? g->max_mem : g->clk_mem; break;
    case NVML_CLOCK_VIDEO: *clk = max ? g->max_video : g->clk_video; break;
    default: return leave(NVML_ERROR_INVALID_ARGUMENT);
    }
    return leave(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned *c) { return get_clock(d, t, c, 0); }
EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned *c) { return get_clock(d, t, c, 1); }

#define ENABLE_GETTER(fn, value)                                          \
    EXPORT nvmlReturn_t fn(nvmlDevice_t d, nvmlEnableState_t *out)        \
    {                                                                     \
        fg_gpu *g;                                                        \
        nvmlReturn_t r = enter_dev(d, &g, 0);                             \
        if (r)                                                            \
            return r;                                                     \
        if (!out)                                                         \
            return leave(NVML_ERROR_INVALID_ARGUMENT);                    \
        *out = (value);                                                   \
        return leave(NVML_SUCCESS);                                       \
    }
ENABLE_GETTER(nvmlDeviceGetPersistenceMode,
              g->persistence_off ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED)
ENABLE_GETTER(nvmlDeviceGetDisplayMode, g->display ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED)
ENABLE_GETTER(nvmlDeviceGetDisplayActive,
              g->display ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED)

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t *mode)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!mode)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!major || !minor)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *major = 9, *minor = 0;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!current || !pending)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *current = *pending = g->mig ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!isMig)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *isMig = 0;
    return leave(NVML_SUCCESS);
}

/*
 * Running processes. Protocol (same for every version): if infos is NULL or
 * *infoCount is too small, set *infoCount to the number needed and return
 * INSUFFICIENT_SIZE (SUCCESS with 0 when there are none).  Graphics lists are
 * always empty: holders model CUDA compute contexts.
 */
typedef enum { PI_V1, PI_V2 } pi_kind;

static nvmlReturn_t running_procs(nvmlDevice_t d, unsigned *count, void *infos, pi_kind kind,
                                  int graphics)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_PROCESSES);
    if (r)
        return r;
    if (!count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->noperm)
        return leave(NVML_ERROR_NO_PERMISSION);
    unsigned n = 0;
    const fg_proc *p = NULL;
    if (!graphics) {
        refresh_holders();
        n = C.nprocs[d->index];
        p = C.procs[d->index];
    }
    if (n == 0) {
        *count = 0;
        return leave(NVML_SUCCESS);
    }
    if (!infos || *count < n) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned long long mem = g->procmem_na ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE
                                               : p[i].mib * MIB;
        if (kind == PI_V1) {
            nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + i;
            o->pid = p[i].pid;
            o->usedGpuMemory = mem;
        } else {
            nvmlProcessInfo_v2_t *o = (nvmlProcessInfo_v2_t *)infos + i;
            o->pid = p[i].pid;
            o->usedGpuMemory = mem;
            o->gpuInstanceId = 0xFFFFFFFFu;     /* MIG disabled */
            o->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) { return running_procs(d, c, i, PI_V2, 0); }
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) { return running_procs(d, c, i, PI_V2, 0); }
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i) { return running_procs(d, c, i, PI_V1, 0); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) { return running_procs(d, c, i, PI_V2, 1); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) { return running_procs(d, c, i, PI_V2, 1); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i) { return running_procs(d, c, i, PI_V1, 1); }
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) { return running_procs(d, c, i, PI_V2, 1); }
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) { return running_procs(d, c, i, PI_V2, 1); }
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i) { return running_procs(d, c, i, PI_V1, 1); }

/* ------------------------------------------- per-process utilisation samples */

static void util_path(const char *dir, unsigned pid, unsigned long long start, char *buf,
                      size_t len)
{
    snprintf(buf, len, "%s/util/%u.%llu", dir, pid, start);
}

/* util[4] of (pid, start) from its file; 0 if set, -1 if none (an idle process). */
static int read_util(const char *dir, unsigned pid, unsigned long long start, unsigned util[4])
{
    char path[PATH_MAX], buf[128];
    util_path(dir, pid, start, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    if (sscanf(buf, "%u %u %u %u", &util[0], &util[1], &util[2], &util[3]) != 4)
        return -1;
    return 0;
}

EXPORT int fakegpu_proc_util_set(unsigned pid, const unsigned util[4])
{
    const char *dir = fakegpu_state_dir();
    char path[PATH_MAX], tmp[PATH_MAX + 32], st;
    unsigned long long start;
    if (!dir) {
        errno = ENOENT;
        return -1;
    }
    for (int i = 0; i < 4; i++)
        if (util[i] > 100) {
            errno = EINVAL;
            return -1;
        }
    if (pid ? proc_stat(pid, &st, &start) : self_identity(&pid, &st, &start))
        return -1;
    snprintf(path, sizeof path, "%s/util", dir);
    mkdir(path, 0777);
    util_path(dir, pid, start, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -1;
    fprintf(f, "%u %u %u %u\n", util[0], util[1], util[2], util[3]);
    if (fclose(f) || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

EXPORT int fakegpu_proc_util_get(unsigned pid, unsigned util[4])
{
    const char *dir = fakegpu_state_dir();
    char st;
    unsigned long long start;
    if (!dir || proc_stat(pid, &st, &start)) {
        errno = ENOENT;
        return -1;
    }
    if (read_util(dir, pid, start, util)) {
        errno = ENOENT;
        return -1;
    }
    return 0;
}

/* nvmlDeviceGetProcessUtilization: the driver records, every FG_UTIL_PERIOD_US, one sample
 * per listed process that was busy (some utilisation above 0, as set with `fakegpu hold
 * --sm-util` or `fakegpu set --pid`); an idle process has no sample. Returned: each busy
 * process's latest sample if it is newer than lastSeenTimeStamp (CPU time in us; 0 = all
 * the driver keeps). None -> NOT_FOUND, as the real driver says. Size protocol as for the
 * process lists: NULL or a short buffer -> INSUFFICIENT_SIZE with the count needed. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
                                                    nvmlProcessUtilizationSample_t *samples,
                                                    unsigned int *count,
                                                    unsigned long long lastSeenTimeStamp)
{
    fg_gpu *g;
    nvmlReturn_t r = enter_dev(d, &g, FG_F_PROCESS_UTIL);
    if (r)
        return r;
    if (!count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->noperm)
        return leave(NVML_ERROR_NO_PERMISSION);
    refresh_holders();
    unsigned long long ts =
        (unsigned long long)(now_ns() / 1000) / FG_UTIL_PERIOD_US * FG_UTIL_PERIOD_US;
    unsigned n = 0, np = C.nprocs[d->index];
    const fg_proc *p = C.procs[d->index];
    unsigned cap = samples ? *count : 0;
    if (ts > lastSeenTimeStamp) {
        for (unsigned i = 0; i < np; i++) {
            unsigned u[4];
            if (read_util(C.dir, p[i].pid, p[i].start, u) || !(u[0] | u[1] | u[2] | u[3]))
                continue;
            nvmlProcessUtilizationSample_t s = {.pid = p[i].pid, .timeStamp = ts,
                                                .smUtil = u[0], .memUtil = u[1],
                                                .encUtil = u[2], .decUtil = u[3]};
            if (n < cap) /* a short buffer is only counted: INSUFFICIENT_SIZE below */
                samples[n] = s;
            n++;
        }
    }
    if (n == 0)
        return leave(NVML_ERROR_NOT_FOUND);
    if (!samples || *count < n) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

/* No ECC errors ever. */
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t type,
                                                nvmlEccCounterType_t counter,
                                                unsigned long long *eccCounts)
{
    fg_gpu *g;
    (void)type, (void)counter;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!eccCounts)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *eccCounts = 0;
    return leave(NVML_SUCCESS);
}

/* Driver models are a Windows concept: Linux drivers export these but say NOT_SUPPORTED. */
EXPORT nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t d, nvmlDriverModel_t *cur,
                                                nvmlDriverModel_t *pending)
{
    fg_gpu *g;
    (void)cur, (void)pending;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    return r ? r : leave(NVML_ERROR_NOT_SUPPORTED);
}
EXPORT nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t d, nvmlDriverModel_t *c, nvmlDriverModel_t *p) { return nvmlDeviceGetDriverModel_v2(d, c, p); }

/* PCIe throughput in KB/s: idle. */
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, nvmlPcieUtilCounter_t counter,
                                                unsigned int *value)
{
    fg_gpu *g;
    (void)counter;
    nvmlReturn_t r = enter_dev(d, &g, 0);
    if (r)
        return r;
    if (!value)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *value = 0;
    return leave(NVML_SUCCESS);
}
