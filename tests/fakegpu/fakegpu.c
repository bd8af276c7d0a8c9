/*
 * fakegpu - control CLI for the stand-in NVIDIA driver (see README.md).
 *
 *   fakegpu init --gpus N [--name NAME] [--total-mib M] [--teardown-ms T]
 *                [--baseline-mib B] [--reserved-mib R] [--driver-version V]
 *   fakegpu hold --gpu K[,K2...] --mib M [--fork-child NAME] [--sm-util P] [--mem-util P]
 *                                            hold until this process dies; with
 *                                            --fork-child also start a child NAME that
 *                                            inherits the device files (never calls NVML)
 *   fakegpu status [--json]
 *   fakegpu set [--gpu K|all] key=value...   e.g. util_gpu=85 temp=71 teardown_ms=0
 *   fakegpu set --pid PID sm_util=P [mem_util=P enc_util=P dec_util=P]
 *                                            a holder's own utilisation (its NVML samples)
 *   fakegpu fault lost --gpu K | noperm [--gpu K] | procmem-na [--gpu K]
 *                 | unsupported FIELD[,FIELD] [--gpu K] | slow --ms N | clear
 *
 * All state lives in $FAKEGPU_STATE. Nothing here depends on argv[0], so a
 * holder may be started as `exec -a "VLLM::Worker_TP0" fakegpu hold ...`.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fakegpu.h"

static const char *dir;

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "fakegpu: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(2);
}

static void usage(void)
{
    fputs("usage: fakegpu init --gpus N [--name NAME] [--total-mib M] [--teardown-ms T]\n"
          "                    [--baseline-mib B] [--reserved-mib R] [--driver-version V]\n"
          "       fakegpu hold --gpu K[,K...] --mib M [--fork-child NAME] [--sm-util P]\n"
          "                    [--mem-util P]\n"
          "       fakegpu status [--json]\n"
          "       fakegpu set [--gpu K|all] key=value...\n"
          "       fakegpu set --pid PID sm_util=P [mem_util=P] [enc_util=P] [dec_util=P]\n"
          "       fakegpu fault lost --gpu K | noperm [--gpu K] | procmem-na [--gpu K]\n"
          "                     | unsupported FIELD[,FIELD...] [--gpu K] | slow --ms N | clear\n"
          "state directory: $FAKEGPU_STATE\n",
          stderr);
    exit(2);
}

static unsigned long long num(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        die("not a number: %s", s);
    return v;
}

static const char *opt(int argc, char **argv, const char *name)
{
    for (int i = 0; i < argc - 1; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

static void load(fg_state *s)
{
    if (fakegpu_state_load(dir, s))
        die("no state in %s (run `fakegpu init` first)", dir);
}

static void save(const fg_state *s)
{
    if (fakegpu_state_save(dir, s))
        die("cannot write state in %s", dir);
}

/* gpu selector: "all"/absent -> -1, else index (validated) */
static int gpu_sel(const fg_state *s, const char *v)
{
    if (!v || !strcmp(v, "all"))
        return -1;
    unsigned long long g = num(v);
    if (g >= s->ngpus)
        die("no such GPU: %s", v);
    return (int)g;
}

static int cmd_init(int argc, char **argv)
{
    fg_state s;
    const char *v;
    unsigned long long gpus = (v = opt(argc, argv, "--gpus")) ? num(v) : 8;
    unsigned long long total = (v = opt(argc, argv, "--total-mib")) ? num(v) : 0;
    if (gpus > FG_MAX_GPUS)
        die("at most 64 GPUs%s", "");
    fakegpu_state_defaults(&s, (unsigned)gpus, opt(argc, argv, "--name"), total);
    if ((v = opt(argc, argv, "--teardown-ms")))
        s.teardown_ms = (unsigned)num(v);
    if ((v = opt(argc, argv, "--driver-version")))
        snprintf(s.driver_version, sizeof s.driver_version, "%s", v);
    for (unsigned g = 0; g < s.ngpus; g++) {
        if ((v = opt(argc, argv, "--baseline-mib")))
            s.g[g].baseline_mib = num(v);
        if ((v = opt(argc, argv, "--reserved-mib")))
            s.g[g].reserved_mib = num(v);
    }
    int fd = fakegpu_state_lock(dir);
    save(&s);
    /* fresh state: forget holders of a previous run (their watchers cope) */
    char hdir[4096];
    snprintf(hdir, sizeof hdir, "%s/holders", dir);
    DIR *d = opendir(hdir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (strchr("hod", de->d_name[0]) && de->d_name[1] == '.')
                unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    /* a GPU that is gone has no device file; nvidiactl stays (holders' locks live on it) */
    snprintf(hdir, sizeof hdir, "%s/dev", dir);
    d = opendir(hdir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            char *end;
            if (strncmp(de->d_name, "nvidia", 6) || !isdigit((unsigned char)de->d_name[6]))
                continue;
            unsigned long minor = strtoul(de->d_name + 6, &end, 10);
            if (!*end && minor >= s.ngpus)
                unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
    }
    fakegpu_state_unlock(fd);
    return 0;
}

/* A child that inherits the holder's device files and then exec()s `fakegpu __child`
 * as NAME (a compile worker, a dataloader): it never calls NVML, so the driver never
 * lists it, yet it keeps the holder's memory alive after the holder dies. Returns its
 * pid once it has exec()ed (so its name is NAME by then). */
static pid_t fork_child(const char *name)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    int sync[2];
    if (len <= 0 || pipe2(sync, O_CLOEXEC))
        die("cannot fork a child%s", "");
    self[len] = 0;
    signal(SIGCHLD, SIG_IGN); /* the holder never waits: let the kernel reap it */
    pid_t pid = fork();
    if (pid < 0)
        die("fork failed: %s", strerror(errno));
    if (pid == 0) {
        char *av[] = {(char *)name, "__child", NULL};
        close(sync[0]);
        int null = open("/dev/null", O_RDWR);
        for (int i = 0; i < 3 && null >= 0; i++)
            dup2(null, i); /* do not keep the test's pipes open */
        if (fakegpu_keep_across_exec() == 0)
            execv(self, av);
        _exit(127);
    }
    close(sync[1]);
    char c;
    while (read(sync[0], &c, 1) < 0 && errno == EINTR) {
    } /* EOF once the child has exec()ed (or died) */
    close(sync[0]);
    return pid;
}

static int cmd_hold(int argc, char **argv)
{
    const char *gv = opt(argc, argv, "--gpu"), *mv = opt(argc, argv, "--mib");
    unsigned gpus[16];
    unsigned long long mib[16];
    unsigned n = 0;
    if (!gv || !mv)
        usage();
    fg_state s;
    load(&s);
    unsigned long long m = num(mv);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", gv);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == 16)
            die("too many GPUs%s", "");
        unsigned long long g = num(tok);
        if (g >= s.ngpus)
            die("no such GPU: %s", tok);
        gpus[n] = (unsigned)g;
        mib[n++] = m;
    }
    if (fakegpu_hold_multi(gpus, mib, n))
        die("hold failed: %s", strerror(errno));
    const char *sm = opt(argc, argv, "--sm-util"), *mu = opt(argc, argv, "--mem-util");
    if (sm || mu) { /* before "ready": the first sample a test takes already sees it */
        unsigned util[4] = {sm ? (unsigned)num(sm) : 0, mu ? (unsigned)num(mu) : 0, 0, 0};
        if (fakegpu_proc_util_set(0, util))
            die("cannot set utilisation: %s", strerror(errno));
    }
    const char *child_name = opt(argc, argv, "--fork-child");
    pid_t child = child_name ? fork_child(child_name) : 0;
    /* "ready" tells a supervising test that the hold is registered */
    if (child_name)
        printf("ready %d child %d\n", (int)getpid(), (int)child);
    else
        printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (;;)
        pause();
    return 0;
}

static const char *fault_list(const fg_gpu *g, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    if (g->lost)
        k += (size_t)snprintf(buf + k, len - k, "%slost", k ? "," : "");
    if (g->noperm && k < len)
        k += (size_t)snprintf(buf + k, len - k, "%snoperm", k ? "," : "");
    if (g->procmem_na && k < len)
        k += (size_t)snprintf(buf + k, len - k, "%sprocmem-na", k ? "," : "");
    char names[256];
    snprintf(names, sizeof names, "%s", fakegpu_field_names());
    for (char *t = strtok(names, ","); t && k < len; t = strtok(NULL, ","))
        if (g->unsupported & (unsigned)fakegpu_field_bit(t))
            k += (size_t)snprintf(buf + k, len - k, "%sunsupported:%s", k ? "," : "", t);
    return buf;
}

static int cmd_status(int argc, char **argv)
{
    fg_state s;
    int json = argc > 0 && !strcmp(argv[0], "--json");
    load(&s);
    if (json)
        printf("{\"driver_version\": \"%s\", \"cuda_version\": %u, \"teardown_ms\": %u, "
               "\"slow_ms\": %u, \"gpus\": [",
               s.driver_version, s.cuda_version, s.teardown_ms, s.slow_ms);
    else
        printf("driver %s  cuda %u  teardown %u ms  slow %u ms  gpus %u\n", s.driver_version,
               s.cuda_version, s.teardown_ms, s.slow_ms, s.ngpus);
    for (unsigned i = 0; i < s.ngpus; i++) {
        const fg_gpu *g = &s.g[i];
        unsigned long long used = 0;
        unsigned np = 0, nt = 0, nd = 0;
        char bus[32], faults[512];
        fakegpu_gpu_usage(i, &used, &np, &nt, &nd);
        fakegpu_bus_id_legacy(g, bus, sizeof bus);
        fault_list(g, faults, sizeof faults);
        if (json)
            printf("%s{\"index\": %u, \"name\": \"%s\", \"uuid\": \"%s\", \"pci_bus_id\": "
                   "\"0000%s\", \"total_mib\": %llu, \"used_mib\": %llu, \"baseline_mib\": "
                   "%llu, \"reserved_mib\": %llu, \"processes\": %u, \"tearing_down\": %u, "
                   "\"detached\": %u, \"util_gpu\": %u, \"temp\": %u, \"power_mw\": %u, "
                   "\"power_limit_mw\": %u, \"faults\": \"%s\"}",
                   i ? ", " : "", i, g->name, g->uuid, bus, g->total_mib, used, g->baseline_mib,
                   g->reserved_mib, np, nt, nd, g->util_gpu, g->temp, g->power_mw,
                   g->power_limit_mw, faults);
        else
            printf("GPU %u  %s  %s  0000%s  %llu/%llu MiB used  %u procs  %u tearing down  "
                   "%u detached  util %u%%  %uC  %.2f/%.2f W%s%s\n",
                   i, g->name, g->uuid, bus, used, g->total_mib, np, nt, nd, g->util_gpu, g->temp,
                   g->power_mw / 1000.0, g->power_limit_mw / 1000.0, *faults ? "  faults: " : "",
                   faults);
    }
    if (json)
        printf("]}\n");
    return 0;
}

/* fakegpu set --pid PID sm_util=P ...: keys not given keep their value */
static int cmd_set_pid(int argc, char **argv, const char *pidv)
{
    static const char *const keys[4] = {"sm_util", "mem_util", "enc_util", "dec_util"};
    unsigned util[4] = {0, 0, 0, 0};
    unsigned pid = (unsigned)num(pidv);
    if (!pid)
        die("no such process: %s", pidv);
    fakegpu_proc_util_get(pid, util); /* none yet: all 0 */
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--pid")) {
            i++;
            continue;
        }
        char kv[256];
        snprintf(kv, sizeof kv, "%s", argv[i]);
        char *eq = strchr(kv, '=');
        int k = 0;
        if (!eq)
            die("expected key=value, got %s", argv[i]);
        *eq = 0;
        while (k < 4 && strcmp(kv, keys[k]))
            k++;
        if (k == 4)
            die("unknown key for --pid (sm_util, mem_util, enc_util, dec_util): %s", kv);
        unsigned long long v = num(eq + 1);
        if (v > 100)
            die("utilisation is 0..100: %s", argv[i]);
        util[k] = (unsigned)v;
    }
    if (fakegpu_proc_util_set(pid, util))
        die("cannot set utilisation of %s (not running?)", pidv);
    return 0;
}

static int cmd_set(int argc, char **argv)
{
    const char *pidv = opt(argc, argv, "--pid");
    if (pidv)
        return cmd_set_pid(argc, argv, pidv);
    int fd = fakegpu_state_lock(dir);
    fg_state s;
    load(&s);
    int gpu = gpu_sel(&s, opt(argc, argv, "--gpu"));
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu")) {
            i++;
            continue;
        }
        char kv[256];
        snprintf(kv, sizeof kv, "%s", argv[i]);
        char *eq = strchr(kv, '=');
        if (!eq)
            die("expected key=value, got %s", argv[i]);
        *eq = 0;
        /* global key? */
        if (!fakegpu_state_set(&s, -1, kv, eq + 1))
            continue;
        int ok = 0;
        for (unsigned g = 0; g < s.ngpus; g++)
            if (gpu < 0 || (unsigned)gpu == g)
                ok |= !fakegpu_state_set(&s, (int)g, kv, eq + 1);
        if (!ok)
            die("unknown key or bad value: %s", argv[i]);
    }
    save(&s);
    fakegpu_state_unlock(fd);
    return 0;
}

static int cmd_fault(int argc, char **argv)
{
    if (argc < 1)
        usage();
    int fd = fakegpu_state_lock(dir);
    fg_state s;
    load(&s);
    const char *what = argv[0];
    int gpu = gpu_sel(&s, opt(argc, argv, "--gpu"));
    for (unsigned g = 0; g < s.ngpus; g++) {
        fg_gpu *x = &s.g[g];
        int sel = gpu < 0 || (unsigned)gpu == g;
        if (!strcmp(what, "clear")) {
            x->lost = x->noperm = x->procmem_na = 0;
            x->unsupported &= FG_F_FAN; /* fan N/A is a device property, not a fault */
        } else if (!sel) {
            continue;
        } else if (!strcmp(what, "lost")) {
            if (gpu < 0)
                die("fault lost needs --gpu K%s", "");
            x->lost = 1;
        } else if (!strcmp(what, "noperm")) {
            x->noperm = 1;
        } else if (!strcmp(what, "procmem-na")) {
            x->procmem_na = 1;
        } else if (!strcmp(what, "unsupported")) {
            if (argc < 2)
                usage();
            char buf[256];
            snprintf(buf, sizeof buf, "%s", argv[1]);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                int bit = fakegpu_field_bit(t);
                if (!bit)
                    die("unknown field (known: %s)", fakegpu_field_names());
                x->unsupported |= (unsigned)bit;
            }
        } else if (strcmp(what, "slow")) {
            die("unknown fault: %s", what);
        }
    }
    if (!strcmp(what, "clear"))
        s.slow_ms = 0;
    if (!strcmp(what, "slow")) {
        const char *ms = opt(argc, argv, "--ms");
        if (!ms)
            usage();
        s.slow_ms = (unsigned)num(ms);
    }
    save(&s);
    fakegpu_state_unlock(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    if (!strcmp(argv[1], "__watch")) { /* internal: fakegpu __watch DIR ENTRY, pipe on fd 3 */
        if (argc != 4)
            return 2;
        return fakegpu_watch_main(3, argv[2], argv[3]);
    }
    if (!strcmp(argv[1], "__child")) { /* internal: a --fork-child child, see fork_child */
        prctl(PR_SET_NAME, argv[0], 0, 0, 0);
        for (;;)
            pause();
    }
    dir = fakegpu_state_dir();
    if (!dir)
        die("FAKEGPU_STATE is not set%s", "");
    const char *cmd = argv[1];
    argc -= 2, argv += 2;
    if (!strcmp(cmd, "init"))
        return cmd_init(argc, argv);
    if (!strcmp(cmd, "hold"))
        return cmd_hold(argc, argv);
    if (!strcmp(cmd, "status"))
        return cmd_status(argc, argv);
    if (!strcmp(cmd, "set"))
        return cmd_set(argc, argv);
    if (!strcmp(cmd, "fault"))
        return cmd_fault(argc, argv);
    usage();
    return 2;
}
