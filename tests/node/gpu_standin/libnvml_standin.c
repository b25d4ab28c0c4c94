/* STAND-IN for NVML (libnvidia-ml.so.1): the calls pynvml makes for the reads and
 * settings gameday uses, over two pretend GPUs; GPU 1 supports neither ECC counters nor
 * locked clocks. Used memory is the CUDA stand-in's, when that is loaded. Built with
 * -DSTANDIN_OLD_DRIVER it is an older driver's: no nvmlDeviceGetTemperatureV, no
 * nvmlSystemGetCudaDriverVersion_v2, and the clocks-event reasons only under their old
 * name (...ClocksThrottleReasons). Driver 550.54.15 with CUDA 12.4; persistence mode on
 * for GPU 0, off for GPU 1. Power limits are per process unless $STANDIN_NVML_SHARED names
 * a file: then every process loading the stand-in reads and sets them there, as a real
 * GPU keeps its power limit whoever set it and whatever process has exited since. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
typedef struct { unsigned long long total, free, used; } memory_t;

static unsigned int locked[2];
static unsigned int local_power[2] = {700000, 700000};
static unsigned int *power = local_power;
static int index_of(void *handle) { return (int)((uintptr_t)handle - 0x100); }

/* the shared power limits of $STANDIN_NVML_SHARED (a new file starts at the default) */
static void share_power(void) {
    const char *path = getenv("STANDIN_NVML_SHARED");
    struct stat st;
    void *mapped;
    int fd;
    if (!path || power != local_power) return;
    fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return;
    if (fstat(fd, &st) != 0 || (st.st_size < (off_t)sizeof local_power &&
            (ftruncate(fd, 0) != 0 ||
             write(fd, local_power, sizeof local_power) != (ssize_t)sizeof local_power))) {
        close(fd);
        return;
    }
    mapped = mmap(NULL, sizeof local_power, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED) power = mapped;
}

int nvmlInit_v2(void) { share_power(); return 0; }
int nvmlInitWithFlags(unsigned int flags) {
    if (flags != 0) return 2;
    share_power();
    return 0;
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "550.54.15");
    return 0;
}

#ifdef STANDIN_OLD_DRIVER
int nvmlSystemGetCudaDriverVersion(int *version) { *version = 12040; return 0; }
#else
int nvmlSystemGetCudaDriverVersion_v2(int *version) { *version = 12040; return 0; }
#endif

const char *nvmlErrorString(int result) {
    return result == 3 ? "Not Supported" : result == 2 ? "Invalid Argument" : "Unknown Error";
}

int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 2; return 0; }

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    if (index > 1) return 2;
    *handle = (void *)(uintptr_t)(0x100 + index);
    return 0;
}

int nvmlDeviceGetName(void *h, char *name, unsigned int length) {
    snprintf(name, length, "Stand-in H100 %d", index_of(h));
    return 0;
}

int nvmlDeviceGetUUID(void *h, char *uuid, unsigned int length) {
    snprintf(uuid, length, "GPU-00000000-0000-0000-0000-00000000000%d", index_of(h));
    return 0;
}

int nvmlDeviceGetPciInfo_v3(void *h, pci_t *pci) {
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x18 + 0x10 * index_of(h);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *h, memory_t *memory) {
    unsigned long long used = 1ULL << 30;
    void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (cuda) {
        size_t (*standin_used)(int) = (size_t (*)(int))dlsym(cuda, "standin_used");
        if (standin_used) used += standin_used(index_of(h));
        dlclose(cuda);
    }
    memory->total = 8ULL << 30;
    memory->used = used;
    memory->free = memory->total - used;
    return 0;
}

/* deprecated: a current driver's stand-in answers NVML_ERROR_DEPRECATED, so that only
 * the old driver's is read */
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *celsius) {
#ifndef STANDIN_OLD_DRIVER
    return 26;
#endif
    if (sensor != 0) return 2;
    *celsius = 40 + index_of(h);
    return 0;
}

#ifndef STANDIN_OLD_DRIVER
typedef struct { unsigned int version; int sensorType; int temperature; } temperature_v1_t;

int nvmlDeviceGetTemperatureV(void *h, temperature_v1_t *reading) {
    if (reading->version != 0x100000C || reading->sensorType != 0) return 2;
    reading->temperature = 40 + index_of(h);
    return 0;
}
#endif

int nvmlDeviceGetClockInfo(void *h, int type, unsigned int *mhz) {
    if (type != 1) return 2;
    *mhz = locked[index_of(h)] ? locked[index_of(h)] : 1755;
    return 0;
}

int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned int *mhz) {
    if (type != 1) return 2;
    *mhz = 1980;
    return 0;
}

int nvmlDeviceGetTotalEccErrors(void *h, int error_type, int counter_type,
                                unsigned long long *count) {
    if (index_of(h) == 1) return 3;
    if (counter_type != 0) return 2;
    *count = error_type == 0 ? 5 : 1;
    return 0;
}

#ifdef STANDIN_OLD_DRIVER
int nvmlDeviceGetCurrentClocksThrottleReasons(void *h, unsigned long long *reasons) {
#else
int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *reasons) {
#endif
    *reasons = locked[index_of(h)] ? 0x2 : 0x1;
    return 0;
}

int nvmlDeviceSetGpuLockedClocks(void *h, unsigned int min_mhz, unsigned int max_mhz) {
    if (index_of(h) == 1) return 3;
    if (min_mhz > max_mhz) return 2;
    locked[index_of(h)] = max_mhz;
    return 0;
}

int nvmlDeviceResetGpuLockedClocks(void *h) { locked[index_of(h)] = 0; return 0; }

int nvmlDeviceGetPowerManagementLimit(void *h, unsigned int *milliwatts) {
    *milliwatts = power[index_of(h)];
    return 0;
}

int nvmlDeviceGetPowerManagementLimitConstraints(void *h, unsigned int *low, unsigned int *high) {
    *low = 200000;
    *high = 700000;
    return 0;
}

int nvmlDeviceSetPowerManagementLimit(void *h, unsigned int milliwatts) {
    if (milliwatts < 200000 || milliwatts > 700000) return 2;
    power[index_of(h)] = milliwatts;
    return 0;
}

/* MIG on for the GPUs whose indexes $STANDIN_MIG_GPUS lists ("0,1"; default none);
 * compute mode from $STANDIN_COMPUTE_MODE (default 0, shared). */
int nvmlDeviceGetMigMode(void *h, unsigned int *current, unsigned int *pending) {
    const char *mig = getenv("STANDIN_MIG_GPUS");
    char digit = (char)('0' + index_of(h));
    *current = mig && strchr(mig, digit) ? 1 : 0;
    *pending = *current;
    return 0;
}

int nvmlDeviceGetPersistenceMode(void *h, int *mode) {
    *mode = index_of(h) == 0;
    return 0;
}

int nvmlDeviceGetComputeMode(void *h, int *mode) {
    const char *forced = getenv("STANDIN_COMPUTE_MODE");
    (void)h;
    *mode = forced ? atoi(forced) : 0;
    return 0;
}
