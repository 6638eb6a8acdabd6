/*
 * A stand-in for libnvidia-ml.so.1 that the real pynvml loads through ctypes.
 *
 * tests/fake_nvml.py replaces the pynvml *module*; this replaces the *driver library*
 * underneath it, so pynvml's own ctypes structs, versioned entry points and error
 * mapping run exactly as they would on a GPU box. Struct layouts, entry-point names,
 * return codes and version rules follow NVIDIA's nvml.h (API 12):
 *   - nvmlMemory_v2_t must carry version sizeof(nvmlMemory_v2_t) | 2 << 24,
 *     nvmlGpmMetricsGet_t and nvmlGpmSupport_t the raw version 1;
 *     anything else is NVML_ERROR_ARGUMENT_VERSION_MISMATCH.
 *   - running processes use the two-call INSUFFICIENT_SIZE protocol.
 *   - GPM samples snapshot cumulative counters; a metric is the rate between two
 *     samples of one device, the earlier one first.
 *   - every call before nvmlInit or after the last nvmlShutdown is UNINITIALIZED.
 * Built with -DOLD_DRIVER it lacks the entry points of newer drivers (the v2 memory
 * struct, clock-event reasons), as a 470-series driver does.
 *
 * Tests drive it through the fake_* functions (values per device, a forced return
 * code per entry point, call counts).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_GPM_METRIC_SM_UTIL 2
#define NVML_GPM_METRIC_ANY_TENSOR_UTIL 5
#define NVML_GPM_METRIC_DRAM_BW_UTIL 10
#define NVML_GPM_METRIC_MAX 98
typedef struct gpm_sample {
    int device; /* -1 until taken */
    double t, dram_bytes, sm_busy_s, tensor_busy_s;
} *nvmlGpmSample_t;
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;

/* ---- the fake devices -------------------------------------------------------------- */
#define MAXDEV 8
#define MAXPROC 16
typedef struct fake_dev {
    char name[96], uuid[96], bus_id[32];
    unsigned int arch, mig_mode, mig_handle, gpm_supported;
    unsigned long long total, reserved, used;
    unsigned int util_gpu, util_mem, power_mw, clock_sm, clock_mem, temp;
    unsigned long long reasons;
    unsigned int nproc, pids[MAXPROC];
    unsigned long long proc_mem[MAXPROC];
    /* GPM: cumulative counters integrated at the current load up to `t`. */
    double peak_Bps, dram_Bps, sm_frac, tensor_frac, t, dram_bytes, sm_busy_s, tensor_busy_s;
    /* The total-energy counter (mJ): the power reading integrated over time, as the driver's counter is. */
    double energy_mj;
} *nvmlDevice_t;

static struct fake_dev devs[MAXDEV];
static unsigned int ndev;
static int refcount;
static int live_samples;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

#define MAXFN 64
static struct { char name[64]; int code; long calls; } fns[MAXFN];
static int nfns;

static int fn_slot(const char *name) {
    for (int i = 0; i < nfns; i++)
        if (!strcmp(fns[i].name, name)) return i;
    if (nfns == MAXFN) abort();
    snprintf(fns[nfns].name, sizeof fns[nfns].name, "%s", name);
    return nfns++;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void integrate(struct fake_dev *d) {
    double t = now_s(), dt = t - d->t;
    d->dram_bytes += d->dram_Bps * dt;
    d->sm_busy_s += d->sm_frac * dt;
    d->tensor_busy_s += d->tensor_frac * dt;
    d->energy_mj += d->power_mw * dt;
    d->t = t;
}

/* Count the call, then: not initialised, a forced code, or a bad handle. */
#define ENTER(handle_required, dev)                                              \
    pthread_mutex_lock(&mu);                                                     \
    int slot_ = fn_slot(__func__);                                               \
    fns[slot_].calls++;                                                          \
    if (!refcount) { pthread_mutex_unlock(&mu); return NVML_ERROR_UNINITIALIZED; } \
    if (fns[slot_].code) { int c_ = fns[slot_].code; pthread_mutex_unlock(&mu); return c_; } \
    if ((handle_required) && !valid(dev)) { pthread_mutex_unlock(&mu); return NVML_ERROR_INVALID_ARGUMENT; }
#define LEAVE(code) do { pthread_mutex_unlock(&mu); return (code); } while (0)

static int valid(nvmlDevice_t d) { return d >= devs && d < devs + ndev; }

/* ---- test controls ------------------------------------------------------------------- */
void fake_reset(void) {
    pthread_mutex_lock(&mu);
    memset(devs, 0, sizeof devs);
    memset(fns, 0, sizeof fns);
    ndev = 0; nfns = 0; refcount = 0; live_samples = 0;
    pthread_mutex_unlock(&mu);
}

int fake_add_device(const char *name, const char *uuid, const char *bus_id, unsigned int arch,
                    unsigned long long total, unsigned long long reserved, unsigned long long used) {
    pthread_mutex_lock(&mu);
    struct fake_dev *d = &devs[ndev];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->uuid, sizeof d->uuid, "%s", uuid);
    snprintf(d->bus_id, sizeof d->bus_id, "%s", bus_id);
    d->arch = arch; d->total = total; d->reserved = reserved; d->used = used;
    d->gpm_supported = arch >= 9; /* Hopper */
    d->t = now_s();
    int i = (int)ndev++;
    pthread_mutex_unlock(&mu);
    return i;
}

void fake_set_memory_used(int i, unsigned long long used) { pthread_mutex_lock(&mu); devs[i].used = used; pthread_mutex_unlock(&mu); }
void fake_set_readings(int i, unsigned int util_gpu, unsigned int util_mem, unsigned int power_mw,
                       unsigned int clock_sm, unsigned int clock_mem, unsigned int temp,
                       unsigned long long reasons) {
    pthread_mutex_lock(&mu);
    struct fake_dev *d = &devs[i];
    integrate(d); /* the energy so far was drawn at the old power */
    d->util_gpu = util_gpu; d->util_mem = util_mem; d->power_mw = power_mw;
    d->clock_sm = clock_sm; d->clock_mem = clock_mem; d->temp = temp; d->reasons = reasons;
    pthread_mutex_unlock(&mu);
}
void fake_set_mig(int i, unsigned int mode, unsigned int is_mig_handle) {
    pthread_mutex_lock(&mu); devs[i].mig_mode = mode; devs[i].mig_handle = is_mig_handle; pthread_mutex_unlock(&mu);
}
void fake_set_gpm_supported(int i, unsigned int supported) {
    pthread_mutex_lock(&mu); devs[i].gpm_supported = supported; pthread_mutex_unlock(&mu);
}
void fake_add_process(int i, unsigned int pid, unsigned long long mem) {
    pthread_mutex_lock(&mu);
    struct fake_dev *d = &devs[i];
    d->pids[d->nproc] = pid; d->proc_mem[d->nproc] = mem; d->nproc++;
    pthread_mutex_unlock(&mu);
}
/* The load from now on: DRAM bytes/s against a peak, fraction of time SMs / tensor cores are busy. */
void fake_set_load(int i, double peak_Bps, double dram_Bps, double sm_frac, double tensor_frac) {
    pthread_mutex_lock(&mu);
    struct fake_dev *d = &devs[i];
    integrate(d);
    d->peak_Bps = peak_Bps; d->dram_Bps = dram_Bps; d->sm_frac = sm_frac; d->tensor_frac = tensor_frac;
    pthread_mutex_unlock(&mu);
}
void fake_fail(const char *fn, int code) { pthread_mutex_lock(&mu); fns[fn_slot(fn)].code = code; pthread_mutex_unlock(&mu); }
long fake_calls(const char *fn) { pthread_mutex_lock(&mu); long c = fns[fn_slot(fn)].calls; pthread_mutex_unlock(&mu); return c; }
int fake_live_samples(void) { return live_samples; }
int fake_refcount(void) { return refcount; }

/* ---- NVML: init and enumeration ------------------------------------------------------- */
/* A process that loads this library in place of libnvidia-ml.so.1 (LD_LIBRARY_PATH) and has no test to drive
 * it gets one device from KVPROF_FAKE_NVML="<name>,<power mW>": an H200-shaped board drawing that constant
 * power, so its energy counter rises by exactly power x time (a whole sweep can be measured against it). */
static void env_device(void) {
    const char *spec = getenv("KVPROF_FAKE_NVML");
    if (!spec || ndev) return;
    char name[96];
    unsigned int mw = 0;
    const char *comma = strchr(spec, ',');
    if (!comma || comma == spec || (size_t)(comma - spec) >= sizeof name) return;
    memcpy(name, spec, (size_t)(comma - spec));
    name[comma - spec] = 0;
    mw = (unsigned int)strtoul(comma + 1, NULL, 10);
    struct fake_dev *d = &devs[ndev++];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->uuid, sizeof d->uuid, "GPU-00000000-fake-4000-8000-000000000001");
    snprintf(d->bus_id, sizeof d->bus_id, "00000000:1B:00.0");
    d->arch = 9; d->total = 143771ull << 20; d->reserved = 592ull << 20; d->used = 1ull << 30;
    d->power_mw = mw; d->gpm_supported = 1;
    d->t = now_s();
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    int slot = fn_slot(__func__);
    fns[slot].calls++;
    if (fns[slot].code) LEAVE(fns[slot].code);
    env_device();
    refcount++;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    ENTER(0, NULL);
    refcount--;
    LEAVE(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER(0, NULL);
    if (length < 80) LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    snprintf(version, length, "%s", "580.95.05");
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER(0, NULL);
    *count = ndev;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER(0, NULL);
    if (index >= ndev) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *device = &devs[index];
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    ENTER(0, NULL);
    for (unsigned int i = 0; i < ndev; i++)
        if (!strcmp(devs[i].uuid, uuid)) { *device = &devs[i]; LEAVE(NVML_SUCCESS); }
    LEAVE(NVML_ERROR_NOT_FOUND); /* NVML wants the whole UUID; CUDA accepts a prefix */
}

static nvmlReturn_t copy_str(char *dst, unsigned int length, const char *src) {
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    ENTER(1, d);
    LEAVE(copy_str(uuid, length, d->uuid));
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    ENTER(1, d);
    LEAVE(copy_str(name, length, d->name));
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    ENTER(1, d);
    memset(pci, 0, sizeof *pci);
    unsigned int dom = 0, bus = 0, dev = 0;
    sscanf(d->bus_id, "%x:%x:%x", &dom, &bus, &dev);
    pci->domain = dom; pci->bus = bus; pci->device = dev;
    snprintf(pci->busId, sizeof pci->busId, "%s", d->bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", dom, bus, dev);
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) {
    ENTER(1, d);
    *is_mig = d->mig_handle;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    ENTER(1, d);
    if (d->arch < 7) LEAVE(NVML_ERROR_NOT_SUPPORTED); /* MIG arrived with Ampere */
    *current = *pending = d->mig_mode;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch) {
    ENTER(1, d);
    *arch = d->arch;
    LEAVE(NVML_SUCCESS);
}

/* ---- NVML: signals ---------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    ENTER(1, d);
    m->total = d->total;
    m->used = d->used + d->reserved; /* v1 counts the driver's reservation as used */
    m->free = d->total - m->used;
    LEAVE(NVML_SUCCESS);
}
#ifndef OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    ENTER(1, d);
    if (m->version != nvmlMemory_v2) LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    m->total = d->total; m->reserved = d->reserved; m->used = d->used;
    m->free = d->total - d->reserved - d->used;
    LEAVE(NVML_SUCCESS);
}
#endif
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    ENTER(1, d);
    u->gpu = d->util_gpu; u->memory = d->util_mem;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    ENTER(1, d);
    *mw = d->power_mw;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    ENTER(1, d);
    integrate(d);
    *mj = (unsigned long long)d->energy_mj; /* whole millijoules, as NVML counts */
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    ENTER(1, d);
    if (type == 1) *mhz = d->clock_sm;       /* NVML_CLOCK_SM */
    else if (type == 2) *mhz = d->clock_mem; /* NVML_CLOCK_MEM */
    else LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    LEAVE(NVML_SUCCESS);
}
#ifndef OLD_DRIVER
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    ENTER(1, d);
    *reasons = d->reasons;
    LEAVE(NVML_SUCCESS);
}
#endif
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) {
    ENTER(1, d);
    *reasons = d->reasons;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp) {
    ENTER(1, d);
    if (sensor != 0) LEAVE(NVML_ERROR_INVALID_ARGUMENT); /* NVML_TEMPERATURE_GPU */
    *temp = d->temp;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    ENTER(1, d);
    if (*count < d->nproc) { *count = d->nproc; LEAVE(d->nproc ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS); }
    if (!infos && d->nproc) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < d->nproc; i++) {
        infos[i].pid = d->pids[i]; infos[i].usedGpuMemory = d->proc_mem[i];
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = d->nproc;
    LEAVE(NVML_SUCCESS);
}

/* ---- NVML: GPM -------------------------------------------------------------------------- */
nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
    ENTER(1, d);
    if (s->version != 1) LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    s->isSupportedDevice = d->gpm_supported;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    ENTER(0, NULL);
    if (!sample) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *sample = calloc(1, sizeof **sample);
    (*sample)->device = -1;
    live_samples++;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    ENTER(0, NULL);
    if (!sample) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    free(sample);
    live_samples--;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t sample) {
    ENTER(1, d);
    if (!sample) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (!d->gpm_supported || d->mig_handle) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    integrate(d);
    sample->device = (int)(d - devs);
    sample->t = d->t; sample->dram_bytes = d->dram_bytes;
    sample->sm_busy_s = d->sm_busy_s; sample->tensor_busy_s = d->tensor_busy_s;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *mg) {
    ENTER(0, NULL);
    if (mg->version != 1) LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (mg->numMetrics > NVML_GPM_METRIC_MAX || !mg->sample1 || !mg->sample2) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    struct gpm_sample *a = mg->sample1, *b = mg->sample2;
    /* Two samples of one device, the earlier first. */
    if (a->device < 0 || a->device != b->device || !(b->t > a->t)) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    double dt = b->t - a->t, peak = devs[a->device].peak_Bps;
    for (unsigned int i = 0; i < mg->numMetrics; i++) {
        nvmlGpmMetric_t *m = &mg->metrics[i];
        m->nvmlReturn = NVML_SUCCESS;
        switch (m->metricId) {
        case NVML_GPM_METRIC_DRAM_BW_UTIL:
            if (peak > 0) m->value = 100.0 * (b->dram_bytes - a->dram_bytes) / dt / peak;
            else m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            break;
        case NVML_GPM_METRIC_SM_UTIL: m->value = 100.0 * (b->sm_busy_s - a->sm_busy_s) / dt; break;
        case NVML_GPM_METRIC_ANY_TENSOR_UTIL: m->value = 100.0 * (b->tensor_busy_s - a->tensor_busy_s) / dt; break;
        default: m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    LEAVE(NVML_SUCCESS);
}
