/*
 * nvidia-smi stand-in. Linked against the stand-in libnvidia-ml.so.1 and
 * reads everything through NVML calls, like the real tool. Output formats
 * follow real nvidia-smi captures:
 *
 *   $ nvidia-smi --query-gpu=index,name,memory.used --format=csv
 *   index, name, memory.used [MiB]
 *   0, NVIDIA H100 80GB HBM3, 1234 MiB
 *   $ nvidia-smi -L
 *   GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
 *
 * Supported: --query-gpu=..., --query-compute-apps=..., --format=csv[,noheader][,nounits],
 * -L, -i/--id, -l N / --loop=N, -lms N / --loop-ms=N, -r/--gpu-reset, and a plain table.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakegpu.h"

static int noheader, nounits;

enum unit { U_NONE, U_MIB, U_PCT, U_W, U_MHZ };
static const char *unit_hdr[] = {"", " [MiB]", " [%]", " [W]", " [MHz]"};
static const char *unit_val[] = {"", " MiB", " %", " W", " MHz"};

/* NVML error -> bracketed value as nvidia-smi prints it in CSV */
static const char *err_value(nvmlReturn_t r)
{
    switch (r) {
    case NVML_ERROR_NOT_SUPPORTED: return "[N/A]";
    case NVML_ERROR_NO_PERMISSION: return "[Insufficient Permissions]";
    case NVML_ERROR_GPU_IS_LOST: return "[GPU is lost]";
    default: return "[Unknown Error]";
    }
}

typedef struct {
    char buf[256];
} val;

static void put_num(val *v, nvmlReturn_t r, unsigned long long x, enum unit u)
{
    if (r)
        snprintf(v->buf, sizeof v->buf, "%s", err_value(r));
    else
        snprintf(v->buf, sizeof v->buf, "%llu%s", x, nounits ? "" : unit_val[u]);
}

static void put_watts(val *v, nvmlReturn_t r, unsigned mw)
{
    if (r)
        snprintf(v->buf, sizeof v->buf, "%s", err_value(r));
    else
        snprintf(v->buf, sizeof v->buf, "%.2f%s", mw / 1000.0, nounits ? "" : " W");
}

static const char *pstate_names = "P0P1P2P3P4P5P6P7P8P9";

/* Returns unit of a --query-gpu field or -1 when unknown. */
static int gpu_field_unit(const char *f)
{
    static const struct { const char *name; enum unit u; } t[] = {
        {"index", U_NONE}, {"uuid", U_NONE}, {"gpu_uuid", U_NONE}, {"name", U_NONE},
        {"gpu_name", U_NONE}, {"serial", U_NONE}, {"count", U_NONE},
        {"memory.total", U_MIB}, {"memory.used", U_MIB}, {"memory.free", U_MIB},
        {"memory.reserved", U_MIB}, {"utilization.gpu", U_PCT}, {"utilization.memory", U_PCT},
        {"temperature.gpu", U_NONE}, {"power.draw", U_W}, {"power.limit", U_W},
        {"enforced.power.limit", U_W}, {"power.management.limit", U_W}, {"fan.speed", U_PCT},
        {"pstate", U_NONE}, {"clocks.sm", U_MHZ}, {"clocks.gr", U_MHZ}, {"clocks.mem", U_MHZ},
        {"clocks.max.sm", U_MHZ}, {"clocks.max.gr", U_MHZ}, {"clocks.max.mem", U_MHZ},
        {"pci.bus_id", U_NONE}, {"gpu_bus_id", U_NONE}, {"driver_version", U_NONE},
        {"persistence_mode", U_NONE}, {"compute_mode", U_NONE}, {"mig.mode.current", U_NONE},
    };
    for (unsigned i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(f, t[i].name))
            return (int)t[i].u;
    return -1;
}

static void gpu_field(nvmlDevice_t d, unsigned idx, const char *f, val *v)
{
    nvmlReturn_t r;
    unsigned x = 0;
    v->buf[0] = 0;
    if (!strcmp(f, "index")) {
        snprintf(v->buf, sizeof v->buf, "%u", idx);
    } else if (!strcmp(f, "count")) {
        nvmlDeviceGetCount_v2(&x);
        snprintf(v->buf, sizeof v->buf, "%u", x);
    } else if (!strcmp(f, "uuid") || !strcmp(f, "gpu_uuid")) {
        r = nvmlDeviceGetUUID(d, v->buf, sizeof v->buf);
        if (r)
            snprintf(v->buf, sizeof v->buf, "%s", err_value(r));
    } else if (!strcmp(f, "name") || !strcmp(f, "gpu_name")) {
        r = nvmlDeviceGetName(d, v->buf, sizeof v->buf);
        if (r)
            snprintf(v->buf, sizeof v->buf, "%s", err_value(r));
    } else if (!strcmp(f, "serial")) {
        r = nvmlDeviceGetSerial(d, v->buf, sizeof v->buf);
        if (r)
            snprintf(v->buf, sizeof v->buf, "%s", err_value(r));
    } else if (!strncmp(f, "memory.", 7)) {
        nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
        r = nvmlDeviceGetMemoryInfo_v2(d, &m);
        unsigned long long b = !strcmp(f, "memory.total") ? m.total
                               : !strcmp(f, "memory.used") ? m.used
                               : !strcmp(f, "memory.free") ? m.free
                                                           : m.reserved;
        put_num(v, r, b / 1048576ULL, U_MIB);
    } else if (!strncmp(f, "utilization.", 12)) {
        nvmlUtilization_t u;
        r = nvmlDeviceGetUtilizationRates(d, &u);
        put_num(v, r, !strcmp(f, "utilization.gpu") ? u.gpu : u.memory, U_PCT);
    } else if (!strcmp(f, "temperature.gpu")) {
        nvmlTemperature_t t = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
        r = nvmlDeviceGetTemperatureV(d, &t);
        put_num(v, r, (unsigned)t.temperature, U_NONE);
    } else if (!strcmp(f, "power.draw")) {
        r = nvmlDeviceGetPowerUsage(d, &x);
        put_watts(v, r, x);
    } else if (!strcmp(f, "power.limit") || !strcmp(f, "enforced.power.limit")) {
        r = nvmlDeviceGetEnforcedPowerLimit(d, &x);
        put_watts(v, r, x);
    } else if (!strcmp(f, "power.management.limit")) {
        r = nvmlDeviceGetPowerManagementLimit(d, &x);
        put_watts(v, r, x);
    } else if (!strcmp(f, "fan.speed")) {
        r = nvmlDeviceGetFanSpeed(d, &x);
        put_num(v, r, x, U_PCT);
    } else if (!strcmp(f, "pstate")) {
        nvmlPstates_t p;
        r = nvmlDeviceGetPerformanceState(d, &p);
        if (r || p > 9)
            snprintf(v->buf, sizeof v->buf, "%s", r ? err_value(r) : "[Unknown Error]");
        else
            snprintf(v->buf, sizeof v->buf, "%.2s", pstate_names + 2 * p);
    } else if (!strncmp(f, "clocks.", 7)) {
        int max = !strncmp(f, "clocks.max.", 11);
        const char *k = f + (max ? 11 : 7);
        nvmlClockType_t t = !strcmp(k, "mem") ? NVML_CLOCK_MEM
                            : !strcmp(k, "sm") ? NVML_CLOCK_SM
                                               : NVML_CLOCK_GRAPHICS;
        r = max ? nvmlDeviceGetMaxClockInfo(d, t, &x) : nvmlDeviceGetClockInfo(d, t, &x);
        put_num(v, r, x, U_MHZ);
    } else if (!strcmp(f, "pci.bus_id") || !strcmp(f, "gpu_bus_id")) {
        nvmlPciInfo_t p;
        r = nvmlDeviceGetPciInfo_v3(d, &p);
        snprintf(v->buf, sizeof v->buf, "%s", r ? err_value(r) : p.busId);
    } else if (!strcmp(f, "driver_version")) {
        r = nvmlSystemGetDriverVersion(v->buf, sizeof v->buf);
        if (r)
            snprintf(v->buf, sizeof v->buf, "%s", err_value(r));
    } else if (!strcmp(f, "persistence_mode")) {
        nvmlEnableState_t e;
        r = nvmlDeviceGetPersistenceMode(d, &e);
        snprintf(v->buf, sizeof v->buf, "%s", r ? err_value(r) : e ? "Enabled" : "Disabled");
    } else if (!strcmp(f, "compute_mode")) {
        snprintf(v->buf, sizeof v->buf, "Default");
    } else if (!strcmp(f, "mig.mode.current")) {
        unsigned cur = 0, pend = 0;
        r = nvmlDeviceGetMigMode(d, &cur, &pend);
        snprintf(v->buf, sizeof v->buf, "%s", r ? err_value(r) : cur ? "Enabled" : "Disabled");
    }
}

/* split a comma list into fields (in place); returns count */
static int split(char *s, char **out, int max)
{
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) {
        while (*t == ' ')
            t++;
        out[n++] = t;
    }
    return n;
}

/* -i / --id selection: index, UUID or PCI bus id */
static const char *id_sel;

static int selected(nvmlDevice_t d, unsigned idx)
{
    if (!id_sel)
        return 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", id_sel);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        char *end;
        unsigned long i = strtoul(t, &end, 10);
        if (!*end && end != t && i == idx)
            return 1;
        nvmlDevice_t h;
        if (!nvmlDeviceGetHandleByUUID(t, &h) && h == d)
            return 1;
        if (!nvmlDeviceGetHandleByPciBusId_v2(t, &h) && h == d)
            return 1;
    }
    return 0;
}

/* Like real nvidia-smi: a device whose handle cannot be had aborts the query. */
static int get_handle(unsigned i, nvmlDevice_t *d)
{
    nvmlReturn_t r = nvmlDeviceGetHandleByIndex_v2(i, d);
    if (!r)
        return 0;
    fg_state s;
    char bus[32] = "";
    if (!fakegpu_state_load(fakegpu_state_dir(), &s) && i < s.ngpus)
        fakegpu_bus_id_legacy(&s.g[i], bus, sizeof bus);
    if (r == NVML_ERROR_GPU_IS_LOST) {
        printf("Unable to determine the device handle for GPU %s: GPU is lost.  "
               "Reboot the system to recover this GPU\n", bus);
        return 15;
    }
    printf("Unable to determine the device handle for GPU %s: %s\n", bus, nvmlErrorString(r));
    return r == NVML_ERROR_NO_PERMISSION ? 4 : 255;
}

static int query_gpu(const char *spec_in)
{
    char *f[64], spec[2048];
    snprintf(spec, sizeof spec, "%s", spec_in); /* split() writes; loops re-run this */
    int nf = split(spec, f, 64);
    for (int i = 0; i < nf; i++)
        if (gpu_field_unit(f[i]) < 0) {
            printf("Field \"%s\" is not a valid field to query.\n\n", f[i]);
            return 2;
        }
    unsigned n = 0;
    nvmlDeviceGetCount_v2(&n);
    nvmlDevice_t dev[FG_MAX_GPUS];
    for (unsigned i = 0; i < n; i++) {
        int rc = get_handle(i, &dev[i]);
        if (rc)
            return rc;
    }
    if (!noheader) {
        for (int i = 0; i < nf; i++)
            printf("%s%s%s", i ? ", " : "", f[i], unit_hdr[gpu_field_unit(f[i])]);
        printf("\n");
    }
    for (unsigned g = 0; g < n; g++) {
        if (!selected(dev[g], g))
            continue;
        for (int i = 0; i < nf; i++) {
            val v;
            gpu_field(dev[g], g, f[i], &v);
            printf("%s%s", i ? ", " : "", v.buf);
        }
        printf("\n");
    }
    return 0;
}

static int app_field_ok(const char *f)
{
    static const char *ok[] = {"pid", "process_name", "name", "used_memory", "used_gpu_memory",
                               "gpu_uuid", "gpu_bus_id", "gpu_name", "gpu_serial", "timestamp"};
    for (unsigned i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(f, ok[i]))
            return 1;
    return 0;
}

static int query_apps(const char *spec_in)
{
    char *f[32], spec[2048];
    snprintf(spec, sizeof spec, "%s", spec_in);
    int nf = split(spec, f, 32);
    for (int i = 0; i < nf; i++)
        if (!app_field_ok(f[i])) {
            printf("Field \"%s\" is not a valid field to query.\n\n", f[i]);
            return 2;
        }
    unsigned n = 0;
    nvmlDeviceGetCount_v2(&n);
    nvmlDevice_t dev[FG_MAX_GPUS];
    for (unsigned i = 0; i < n; i++) {
        int rc = get_handle(i, &dev[i]);
        if (rc)
            return rc;
    }
    if (!noheader) {
        for (int i = 0; i < nf; i++) {
            const char *h = f[i];
            if (!strcmp(h, "used_memory") || !strcmp(h, "used_gpu_memory"))
                h = "used_gpu_memory [MiB]";
            else if (!strcmp(h, "name"))
                h = "process_name";
            printf("%s%s", i ? ", " : "", h);
        }
        printf("\n");
    }
    for (unsigned g = 0; g < n; g++) {
        if (!selected(dev[g], g))
            continue;
        unsigned cnt = 0;
        nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(dev[g], &cnt, NULL);
        nvmlProcessInfo_t *p = NULL;
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
            cnt += 8;
            p = calloc(cnt, sizeof *p);
            r = nvmlDeviceGetComputeRunningProcesses_v3(dev[g], &cnt, p);
        }
        if (r) { /* e.g. NO_PERMISSION: nothing can be listed for this GPU */
            free(p);
            continue;
        }
        char uuid[96] = "", name[128] = "", serial[64] = "";
        nvmlPciInfo_t pci;
        nvmlDeviceGetUUID(dev[g], uuid, sizeof uuid);
        nvmlDeviceGetName(dev[g], name, sizeof name);
        if (nvmlDeviceGetSerial(dev[g], serial, sizeof serial))
            snprintf(serial, sizeof serial, "[N/A]");
        nvmlDeviceGetPciInfo_v3(dev[g], &pci);
        for (unsigned k = 0; k < cnt; k++) {
            for (int i = 0; i < nf; i++) {
                char b[1100];
                if (!strcmp(f[i], "pid")) {
                    snprintf(b, sizeof b, "%u", p[k].pid);
                } else if (!strcmp(f[i], "process_name") || !strcmp(f[i], "name")) {
                    char pn[1024];
                    nvmlReturn_t e = nvmlSystemGetProcessName(p[k].pid, pn, sizeof pn);
                    snprintf(b, sizeof b, "%s",
                             e == NVML_ERROR_NO_PERMISSION ? "[Insufficient Permissions]"
                             : e                          ? "[Not Found]"
                                                          : pn);
                } else if (!strcmp(f[i], "used_memory") || !strcmp(f[i], "used_gpu_memory")) {
                    if (p[k].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
                        snprintf(b, sizeof b, "[N/A]");
                    else
                        snprintf(b, sizeof b, "%llu%s", p[k].usedGpuMemory / 1048576ULL,
                                 nounits ? "" : " MiB");
                } else if (!strcmp(f[i], "gpu_uuid")) {
                    snprintf(b, sizeof b, "%s", uuid);
                } else if (!strcmp(f[i], "gpu_bus_id")) {
                    snprintf(b, sizeof b, "%s", pci.busId);
                } else if (!strcmp(f[i], "gpu_name")) {
                    snprintf(b, sizeof b, "%s", name);
                } else if (!strcmp(f[i], "gpu_serial")) {
                    snprintf(b, sizeof b, "%s", serial);
                } else { /* timestamp */
                    time_t t = time(NULL);
                    struct tm tm;
                    localtime_r(&t, &tm);
                    strftime(b, sizeof b, "%Y/%m/%d %H:%M:%S.000", &tm);
                }
                printf("%s%s", i ? ", " : "", b);
            }
            printf("\n");
        }
        free(p);
    }
    return 0;
}

static int list_gpus(void)
{
    unsigned n = 0;
    nvmlDeviceGetCount_v2(&n);
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        int rc = get_handle(i, &d);
        if (rc)
            return rc;
        if (!selected(d, i))
            continue;
        char name[128] = "", uuid[96] = "";
        nvmlDeviceGetName(d, name, sizeof name);
        nvmlDeviceGetUUID(d, uuid, sizeof uuid);
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
    }
    return 0;
}

/* Simplified version of the default table (header + one block per GPU + processes). */
static int table(void)
{
    char drv[80] = "";
    int cuda = 0;
    unsigned n = 0;
    nvmlSystemGetDriverVersion(drv, sizeof drv);
    nvmlSystemGetCudaDriverVersion(&cuda);
    nvmlDeviceGetCount_v2(&n);
    nvmlDevice_t dev[FG_MAX_GPUS];
    for (unsigned i = 0; i < n; i++) {
        int rc = get_handle(i, &dev[i]);
        if (rc)
            return rc;
    }
    time_t t = time(NULL);
    char ts[64];
    strftime(ts, sizeof ts, "%a %b %e %H:%M:%S %Y", localtime(&t));
    const char *sep = "+-----------------------------------------+------------------------+----------------------+";
    printf("%s\n", ts);
    printf("+-----------------------------------------------------------------------------------------+\n");
    char cv[16];
    snprintf(cv, sizeof cv, "%d.%d", cuda / 1000, cuda % 1000 / 10);
    printf("| NVIDIA-SMI %-14s Driver Version: %-14s CUDA Version: %-9s|\n", drv, drv, cv);
    printf("%s\n", sep);
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    printf("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n");
    printf("|                                         |                        |               MIG M. |\n");
    printf("|=========================================+========================+======================|\n");
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d = dev[i];
        char name[128] = "";
        unsigned temp = 0, pw = 0, pl = 0, fan = 0;
        nvmlPstates_t ps = NVML_PSTATE_0;
        nvmlUtilization_t u = {0, 0};
        nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
        nvmlPciInfo_t pci;
        nvmlDeviceGetName(d, name, sizeof name);
        nvmlDeviceGetPciInfo_v3(d, &pci);
        char sfan[8], stemp[16], spw[40], sutil[8];
        snprintf(sfan, sizeof sfan, nvmlDeviceGetFanSpeed(d, &fan) ? "N/A" : "%u%%", fan);
        nvmlTemperature_t tv = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
        int okt = !nvmlDeviceGetTemperatureV(d, &tv);
        temp = (unsigned)tv.temperature;
        snprintf(stemp, sizeof stemp, okt ? "%uC" : "N/A", temp);
        int okp = !nvmlDeviceGetPowerUsage(d, &pw), okl = !nvmlDeviceGetEnforcedPowerLimit(d, &pl);
        char a[12], b[12];
        snprintf(a, sizeof a, okp ? "%uW" : "N/A", pw / 1000);
        snprintf(b, sizeof b, okl ? "%uW" : "N/A", pl / 1000);
        snprintf(spw, sizeof spw, "%s / %s", a, b);
        snprintf(sutil, sizeof sutil, nvmlDeviceGetUtilizationRates(d, &u) ? "N/A" : "%u%%", u.gpu);
        nvmlDeviceGetPerformanceState(d, &ps);
        nvmlDeviceGetMemoryInfo_v2(d, &m);
        char mem[40];
        snprintf(mem, sizeof mem, "%lluMiB / %lluMiB", m.used / 1048576ULL, m.total / 1048576ULL);
        printf("| %3u  %-28.28s    On | %-16s   Off |                    0 |\n", i, name, pci.busId);
        printf("| %-4s %5s  P%-2d %25s | %22s | %6s      Default |\n", sfan, stemp, (int)ps, spw, mem, sutil);
        printf("|                                         |                        |             Disabled |\n");
        printf("%s\n", sep);
    }
    printf("\n+-----------------------------------------------------------------------------------------+\n");
    printf("| Processes:                                                                              |\n");
    printf("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n");
    printf("|        ID   ID                                                               Usage      |\n");
    printf("|=========================================================================================|\n");
    int any = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned cnt = 0;
        nvmlProcessInfo_t *p = NULL;
        nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(dev[i], &cnt, NULL);
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
            cnt += 8;
            p = calloc(cnt, sizeof *p);
            r = nvmlDeviceGetComputeRunningProcesses_v3(dev[i], &cnt, p);
        }
        for (unsigned k = 0; !r && k < cnt; k++) {
            char pn[1024] = "";
            if (nvmlSystemGetProcessName(p[k].pid, pn, sizeof pn))
                snprintf(pn, sizeof pn, "[Not Found]");
            char memu[24];
            if (p[k].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
                snprintf(memu, sizeof memu, "N/A");
            else
                snprintf(memu, sizeof memu, "%lluMiB", p[k].usedGpuMemory / 1048576ULL);
            printf("|  %3u   N/A  N/A  %15u      C   %-33.33s %10s |\n", i, p[k].pid, pn, memu);
            any = 1;
        }
        free(p);
    }
    if (!any)
        printf("|  No running processes found                                                             |\n");
    printf("+-----------------------------------------------------------------------------------------+\n");
    return 0;
}

/*
 * -r / --gpu-reset [-i ID]: as the real tool, refused while anything holds the GPU (a
 * listed process, or a process that still has its device files: a detached holder),
 * with its wording and exit status 255 (NVIDIA/gpu-operator#118, NVIDIA/NVSentinel#1690);
 * else the memory no process holds (leak_mib) is given back and it says
 * "GPU <bus id> was successfully reset." Without -i every GPU is reset, all or none.
 */
static int gpu_reset(unsigned n)
{
    unsigned busy = 0, picked = 0;
    int want[FG_MAX_GPUS] = {0};
    char bus[FG_MAX_GPUS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    for (unsigned i = 0; i < n && i < FG_MAX_GPUS; i++) {
        nvmlDevice_t d;
        if (get_handle(i, &d))
            return 15;
        if (!selected(d, i))
            continue;
        nvmlPciInfo_t p;
        if (nvmlDeviceGetPciInfo_v3(d, &p))
            return 15;
        snprintf(bus[i], sizeof bus[i], "%s", p.busId);
        unsigned nprocs = 0, ndetached = 0;
        fakegpu_gpu_usage(i, NULL, &nprocs, NULL, &ndetached);
        want[i] = 1, picked++;
        if (nprocs + ndetached) {
            printf("GPU %s is currently in use by another process.\n\n", bus[i]);
            busy++;
        }
    }
    if (!picked) {
        printf("No devices were found\n");
        return 6;
    }
    if (busy) {
        printf("%u device%s currently being used by one or more other processes (e.g., "
               "Fabric Manager, CUDA application, graphics application such as an X server, "
               "or a monitoring application such as another instance of nvidia-smi). Please "
               "first kill all processes using this device and all compute applications "
               "running in the system.\n", busy, busy == 1 ? " is" : "s are");
        return 255;
    }
    const char *dir = fakegpu_state_dir();
    int fd = fakegpu_state_lock(dir);
    fg_state s;
    int bad = fd < 0 || fakegpu_state_load(dir, &s);
    for (unsigned i = 0; !bad && i < n && i < FG_MAX_GPUS; i++)
        if (want[i])
            s.g[i].leak_mib = 0;
    bad = bad || fakegpu_state_save(dir, &s);
    if (fd >= 0)
        fakegpu_state_unlock(fd);
    if (bad) {
        printf("Unable to reset GPU: Unknown Error\n");
        return 255;
    }
    for (unsigned i = 0; i < n && i < FG_MAX_GPUS; i++)
        if (want[i])
            printf("GPU %s was successfully reset.\n", bus[i]);
    return 0;
}

int main(int argc, char **argv)
{
    char *qgpu = NULL, *qapps = NULL;
    int list = 0, reset = 0;
    long loop_ms = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strncmp(a, "--query-gpu=", 12))
            qgpu = a + 12;
        else if (!strcmp(a, "--query-gpu") && next)
            qgpu = argv[++i];
        else if (!strncmp(a, "--query-compute-apps=", 21))
            qapps = a + 21;
        else if (!strcmp(a, "--query-compute-apps") && next)
            qapps = argv[++i];
        else if (!strncmp(a, "--format=", 9) || (!strcmp(a, "--format") && next)) {
            char *fmt = a[8] == '=' ? a + 9 : argv[++i];
            noheader = strstr(fmt, "noheader") != NULL;
            nounits = strstr(fmt, "nounits") != NULL;
            if (strncmp(fmt, "csv", 3)) {
                printf("\"%s\" is not a valid format.\n", fmt);
                return 2;
            }
        } else if (!strcmp(a, "-L") || !strcmp(a, "--list-gpus"))
            list = 1;
        else if (!strcmp(a, "-r") || !strcmp(a, "--gpu-reset"))
            reset = 1;
        else if ((!strcmp(a, "-i") || !strcmp(a, "--id")) && next)
            id_sel = argv[++i];
        else if (!strncmp(a, "--id=", 5))
            id_sel = a + 5;
        else if (!strcmp(a, "-l") && next)
            loop_ms = atol(argv[++i]) * 1000;
        else if (!strncmp(a, "--loop=", 7))
            loop_ms = atol(a + 7) * 1000;
        else if (!strcmp(a, "-lms") && next)
            loop_ms = atol(argv[++i]);
        else if (!strncmp(a, "--loop-ms=", 10))
            loop_ms = atol(a + 10);
        else {
            printf("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n");
            return 2;
        }
    }
    nvmlReturn_t r = nvmlInit_v2();
    if (r) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
        return 9;
    }
    unsigned n = 0;
    nvmlDeviceGetCount_v2(&n);
    if (n == 0) {
        printf("No devices were found\n");
        nvmlShutdown();
        return 6;
    }
    int rc;
    if (reset) {
        rc = gpu_reset(n);
        nvmlShutdown();
        return rc;
    }
    for (;;) {
        if (qgpu)
            rc = query_gpu(qgpu);
        else if (qapps)
            rc = query_apps(qapps);
        else if (list)
            rc = list_gpus();
        else
            rc = table();
        fflush(stdout);
        if (rc || loop_ms <= 0)
            break;
        struct timespec ts = {loop_ms / 1000, (loop_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (!noheader && (qgpu || qapps)) {
            /* real nvidia-smi -l prints the header once, then only rows */
            noheader = 1;
        }
    }
    nvmlShutdown();
    return rc;
}
