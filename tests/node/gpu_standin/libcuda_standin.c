/* STAND-IN for the CUDA driver (libcuda.so.1): the driver calls gameday's gpu.oom makes,
 * over two pretend devices of 8 GiB each, 1 GiB of each used by others before any
 * allocation (as NVML's stand-in reports). Test helpers: standin_* functions. Device
 * memory is per process unless $STANDIN_CUDA_SHARED names a file: then every process
 * loading the stand-in counts its use there, as processes share a real GPU's memory.
 * $CUDA_VISIBLE_DEVICES (indexes, "1" or "0,1") hides the other devices as the driver
 * does: they have no ordinal and no PCI bus id lookup finds them; ordinals count the
 * visible ones only. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define MAX_ALLOCS 4096
static const size_t TOTAL = 8ULL << 30;
static const size_t OTHERS = 1ULL << 30;
static size_t local_used[2];
static size_t *used = local_used;
static int initialised;
static CUcontext stack[64];
static int depth;
static int live_contexts;
static struct { CUdeviceptr ptr; size_t size; int device; } allocs[MAX_ALLOCS];
typedef struct { int device; } context_t;

static int current_device(void) { return depth ? ((context_t *)stack[depth - 1])->device : -1; }

/* the shared use counts of $STANDIN_CUDA_SHARED, mapped into this process */
static void share_used(void) {
    const char *path = getenv("STANDIN_CUDA_SHARED");
    void *mapped;
    int fd;
    if (!path || used != local_used) return;
    fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return;
    if (ftruncate(fd, sizeof local_used) != 0) { close(fd); return; }
    mapped = mmap(NULL, sizeof local_used, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED) used = mapped;
}

CUresult cuInit(unsigned int flags) {
    if (flags) return 1;
    share_used();
    initialised = 1;
    return 0;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 3: *name = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
    case 101: *name = "CUDA_ERROR_INVALID_DEVICE"; return 0;
    case 201: *name = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
    default: return 1;
    }
}

/* the physical device of each ordinal under $CUDA_VISIBLE_DEVICES; their number */
static int visible(int physical[2]) {
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    int count = 0;
    if (!list) { physical[0] = 0; physical[1] = 1; return 2; }
    for (const char *c = list; *c && count < 2; c++)
        if (*c == '0' || *c == '1') physical[count++] = *c - '0';
    return count;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    int physical[2];
    if (!initialised) return 3;
    if (ordinal < 0 || ordinal >= visible(physical)) return 101;
    *device = ordinal;
    return 0;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *device, const char *bus_id) {
    int physical[2], count = visible(physical), wanted = -1;
    if (!initialised) return 3;
    if (strcmp(bus_id, "00000000:18:00.0") == 0) wanted = 0;
    if (strcmp(bus_id, "00000000:28:00.0") == 0) wanted = 1;
    if (wanted < 0) return 1;
    for (int ordinal = 0; ordinal < count; ordinal++)
        if (physical[ordinal] == wanted) { *device = ordinal; return 0; }
    return 101;
}

CUresult cuCtxCreate_v2(CUcontext *context, unsigned int flags, CUdevice device) {
    int physical[2];
    context_t *created;
    if (flags || device < 0 || device >= visible(physical)) return 1;
    created = malloc(sizeof *created);
    created->device = physical[device];
    *context = created;
    stack[depth++] = created;
    live_contexts++;
    return 0;
}

CUresult cuCtxPushCurrent_v2(CUcontext context) { stack[depth++] = context; return 0; }

CUresult cuCtxPopCurrent_v2(CUcontext *context) {
    if (!depth) return 201;
    *context = stack[--depth];
    return 0;
}

CUresult cuCtxDestroy_v2(CUcontext context) { free(context); live_contexts--; return 0; }

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    int device = current_device();
    if (device < 0) return 201;
    *free_bytes = TOTAL - OTHERS - used[device];
    *total = TOTAL;
    return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t size) {
    int device = current_device();
    if (device < 0) return 201;
    if (size > TOTAL - OTHERS - used[device]) return 2;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].ptr) {
            allocs[i].ptr = 0x7f0000000000ULL + (CUdeviceptr)i * 0x100000ULL + 0x1000;
            allocs[i].size = size;
            allocs[i].device = device;
            __atomic_add_fetch(&used[device], size, __ATOMIC_SEQ_CST);
            *pointer = allocs[i].ptr;
            return 0;
        }
    }
    return 2;
}

CUresult cuMemFree_v2(CUdeviceptr pointer) {
    if (current_device() < 0) return 201;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].ptr == pointer) {
            __atomic_sub_fetch(&used[allocs[i].device], allocs[i].size, __ATOMIC_SEQ_CST);
            allocs[i].ptr = 0;
            return 0;
        }
    }
    return 1;
}

size_t standin_used(int device) { return used[device]; }
int standin_live_contexts(void) { return live_contexts; }
int standin_depth(void) { return depth; }
