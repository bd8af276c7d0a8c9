/*
 * fakegpu.h - private interface of the stand-in NVIDIA driver (tests only).
 *
 * The stand-in library libnvidia-ml.so.1 exports the NVML API (declared by
 * NVIDIA's own nvml.h, so all struct layouts are exact) plus the fakegpu_*
 * helpers declared here, which the `fakegpu` CLI and the `nvidia-smi`
 * stand-in use to read/write the state directory ($FAKEGPU_STATE).
 *
 * State directory layout
 *   config            key=value text, replaced atomically (write tmp + rename)
 *                     by writers holding flock(.lock); readers never lock.
 *   .lock             flock()ed by writers of config (read-modify-write).
 *   holders/          one EMPTY file per holder; all data is in the name so a
 *                     full scan is a single readdir, no opens:
 *                       h.<pid>.<starttime>.<seq>.0.<gpu>:<mib>[_<gpu>:<mib>...]
 *                     when the holder dies while another process (a forked child)
 *                     still has its device files open it is renamed (atomic) to
 *                       o.<pid>.<starttime>.<seq>.0.<allocs>   (not listed, still used)
 *                     and once no process has them open any more to
 *                       d.<pid>.<starttime>.<seq>.<death_ns>.<allocs>
 *                     which is unlinked once the teardown delay has passed.
 *   dev/              the device files holders open, as CUDA opens /dev/nvidia*:
 *                     nvidiactl, nvidia-uvm, nvidia<N> (one per GPU; minor = index).
 *                     Each holder takes an OFD write lock on one byte of
 *                     dev/nvidiactl (offset: fg_client_key) through its own open
 *                     file description, and maps it: the lock lasts exactly as long
 *                     as some process still has that description open or mapped
 *                     (fork shares it), which is when the real driver frees memory.
 */
#ifndef FAKEGPU_H
#define FAKEGPU_H

#define FG_MAX_GPUS 64
#define FG_NAME_LEN 96

/* Bits for fg_gpu.unsupported: fields for which NVML returns NOT_SUPPORTED. */
enum {
    FG_F_POWER = 1u << 0,       /* nvmlDeviceGetPowerUsage */
    FG_F_POWER_LIMIT = 1u << 1, /* Enforced / management power limit */
    FG_F_TEMPERATURE = 1u << 2,
    FG_F_UTILIZATION = 1u << 3,
    FG_F_FAN = 1u << 4,
    FG_F_CLOCKS = 1u << 5,
    FG_F_PSTATE = 1u << 6,
    FG_F_MEMORY = 1u << 7,
    FG_F_PROCESSES = 1u << 8,
    FG_F_SERIAL = 1u << 9,
    FG_F_PROCESS_UTIL = 1u << 10, /* nvmlDeviceGetProcessUtilization */
};

/* Driver period of per-process utilisation samples (nvmlDeviceGetProcessUtilization). */
#define FG_UTIL_PERIOD_US 100000ULL

typedef struct {
    char name[FG_NAME_LEN];
    char uuid[64];
    char serial[32];
    unsigned long long total_mib, baseline_mib, reserved_mib;
    /* used with no process at all (a driver-level leak): not listed, no device file
     * holds it; only a GPU reset (nvidia-smi --gpu-reset) gives it back */
    unsigned long long leak_mib;
    unsigned mig;             /* 1: MIG mode enabled (current and pending) */
    unsigned display;         /* 1: a display is active on it (the console's GPU) */
    unsigned persistence_off; /* 1: persistence mode disabled (default: enabled) */
    unsigned util_gpu, util_mem, temp, fan, pstate;
    unsigned power_mw, power_limit_mw;
    unsigned clk_graphics, clk_sm, clk_mem, clk_video;
    unsigned max_graphics, max_sm, max_mem, max_video;
    unsigned pci_domain, pci_bus, pci_device, pci_devid, pci_subsys;
    /* faults */
    unsigned lost;          /* every call on this GPU -> GPU_IS_LOST */
    unsigned noperm;        /* process lists -> NO_PERMISSION */
    unsigned procmem_na;    /* processes listed with usedGpuMemory N/A */
    unsigned unsupported;   /* FG_F_* bitmask -> NOT_SUPPORTED */
} fg_gpu;

typedef struct {
    unsigned ngpus;
    char driver_version[32];
    char nvml_version[32];
    unsigned cuda_version;  /* e.g. 13000 */
    unsigned teardown_ms;   /* memory of a dead holder is freed this long after death */
    unsigned slow_ms;       /* fault: every NVML call sleeps this long */
    fg_gpu g[FG_MAX_GPUS];
} fg_state;

/* One process holding memory, as seen in a snapshot. */
typedef struct {
    unsigned pid;
    unsigned long long mib;
    unsigned long long start; /* /proc starttime: the identity its utilisation is kept under */
} fg_proc;

/* --- exported by libnvidia-ml.so.1 (stand-in) --- */
const char *fakegpu_state_dir(void);                   /* $FAKEGPU_STATE or NULL */
void fakegpu_state_defaults(fg_state *s, unsigned ngpus, const char *name,
                            unsigned long long total_mib);
int fakegpu_state_load(const char *dir, fg_state *s);  /* 0 ok, -1 errno */
int fakegpu_state_save(const char *dir, const fg_state *s); /* atomic */
int fakegpu_state_lock(const char *dir);               /* returns fd (flock held) */
void fakegpu_state_unlock(int fd);
int fakegpu_field_bit(const char *name);               /* "power" -> FG_F_POWER */
const char *fakegpu_field_names(void);
int fakegpu_state_set(fg_state *s, int gpu, const char *key, const char *value);
/* Hold `mib` MiB on each GPU in gpus[0..n) until the calling process dies. */
int fakegpu_hold_multi(const unsigned *gpus, const unsigned long long *mib, unsigned n);
int fakegpu_hold(unsigned gpu, unsigned long long mib);
/* Let this process's device-file fds (opened by holds) survive exec: a child that is
 * forked and then exec()s something else keeps the memory alive, as with CUDA. */
int fakegpu_keep_across_exec(void);
/* Snapshot helpers (no nvmlInit needed). used_mib includes baseline, detached holders
 * (dead, device files still open elsewhere) and teardown. */
int fakegpu_gpu_usage(unsigned gpu, unsigned long long *used_mib, unsigned *nprocs,
                      unsigned *ntearing, unsigned *ndetached);
void fakegpu_bus_id_legacy(const fg_gpu *g, char *buf, unsigned len);
int fakegpu_watch_main(int fd, const char *dir, const char *entry);
/* Per-process utilisation (percent: sm, mem, enc, dec) of the live process pid, kept in
 * $FAKEGPU_STATE/util/<pid>.<starttime> (atomic replace) until that process is gone.
 * pid 0: the calling process, as the driver sees it (see FAKEGPU_HOST_PROC). */
int fakegpu_proc_util_set(unsigned pid, const unsigned util[4]); /* 0, or -1 + errno */
int fakegpu_proc_util_get(unsigned pid, unsigned util[4]);       /* 0, or -1 + errno */
/* Process name as real NVML reports it (argv[0] from /proc/PID/cmdline). */
int fakegpu_process_name(unsigned pid, char *buf, unsigned len); /* 0, or errno */

#endif
