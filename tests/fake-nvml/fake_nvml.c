/*
 * A fake libnvidia-ml.so.1 for tests: the real nvml-wrapper crate loads it like the vendor
 * library and reads GPUs described by the JSON file named in $FAKE_NVML_CONFIG:
 *
 *   {"driver_version": "570.124.04", "cuda_driver_version": 12080, "init_error": 0,
 *    "devices": [{"name": "NVIDIA GeForce RTX 3090", "pci_bus_id": "00000000:01:00.0",
 *                 "pci_device_id": 571740382, "uuid": "GPU-...", "memory_total_mib": 24576,
 *                 "memory_used_mib": 310, "cc_major": 8, "cc_minor": 6, "temperature_c": 41,
 *                 "power_mw": 28000, "power_limit_mw": 350000, "num_fans": 2, "fan_speed_pct": 30,
 *                 "fan_min_pct": 30, "fan_max_pct": 100}]}
 *
 * A device without "power_limit_mw" answers the enforced power limit with NVML_ERROR_NOT_SUPPORTED.
 *
 * A device with "lost": 1 answers fan calls with NVML_ERROR_GPU_IS_LOST (a GPU fallen off the bus);
 * one with "no_permission": 1 answers fan writes with NVML_ERROR_NO_PERMISSION (a process that
 * is not root, as NVML answers every device command then).
 *
 * A device with "auto_fan_speed_pct": N runs its fans at N % once handed back to the driver's auto
 * (SetDefaultFanSpeed_v2), as the driver's curve would at the device's temperature: 0 for a
 * zero-rpm card under its stop temperature. Without it a hand-back leaves the reported speed as
 * it was.
 *
 * Fan writes (SetFanSpeed_v2, SetDefaultFanSpeed_v2) are appended to $FAKE_NVML_LOG, one line
 * each, so tests can check what the supervisor commanded. Only the calls the supervisor makes
 * are implemented; the loader resolves symbols lazily, so missing ones fail only when called.
 * The JSON reader handles exactly this flat shape (no nesting inside a device object).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999
};

#define MAX_DEVICES 8
#define MAX_FANS 4

struct fake_device {
    char name[96], bus_id[32], uuid[96];
    unsigned pci_device_id;
    unsigned long long memory_total, memory_used;
    int cc_major, cc_minor;
    unsigned temperature_c, power_mw, power_limit_mw, num_fans, fan_min, fan_max;
    unsigned fan_speed[MAX_FANS];
    int fan_manual[MAX_FANS];
    int lost, no_permission;
    /* What the driver's auto runs the fans at, or -1 for "as they were". */
    int auto_fan_speed;
    unsigned index;
};

typedef struct fake_device *nvmlDevice_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static struct fake_device devices[MAX_DEVICES];
static unsigned device_count;
static char driver_version[80];
static int cuda_driver_version;
static int initialised;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf) { fclose(f); return NULL; }
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

/* Finds "key": inside [start, end) and returns a pointer to its value, or NULL. */
static const char *find_value(const char *start, const char *end, const char *key) {
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    size_t plen = strlen(pattern);
    for (const char *p = start; p && p + plen < end; p++) {
        if (strncmp(p, pattern, plen) == 0) {
            const char *v = p + plen;
            while (v < end && (*v == ' ' || *v == ':' || *v == '\n' || *v == '\t')) v++;
            return v < end ? v : NULL;
        }
    }
    return NULL;
}

static long long get_int(const char *start, const char *end, const char *key, long long fallback) {
    const char *v = find_value(start, end, key);
    return v ? strtoll(v, NULL, 0) : fallback;
}

static void get_string(const char *start, const char *end, const char *key, char *out, size_t cap) {
    const char *v = find_value(start, end, key);
    out[0] = 0;
    if (!v || *v != '"') return;
    v++;
    size_t i = 0;
    while (v < end && *v != '"' && i + 1 < cap) out[i++] = *v++;
    out[i] = 0;
}

static nvmlReturn_t load_config(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path) return NVML_ERROR_DRIVER_NOT_LOADED;
    char *json = slurp(path);
    if (!json) return NVML_ERROR_DRIVER_NOT_LOADED;
    const char *end = json + strlen(json);
    int init_error = (int)get_int(json, end, "init_error", 0);
    if (init_error) { free(json); return init_error; }
    const char *list = find_value(json, end, "devices");
    get_string(json, list ? list : end, "driver_version", driver_version, sizeof driver_version);
    cuda_driver_version = (int)get_int(json, list ? list : end, "cuda_driver_version", 12040);
    device_count = 0;
    for (const char *p = list; p && p < end && *p != ']' && device_count < MAX_DEVICES; p++) {
        if (*p != '{') continue;
        const char *close = strchr(p, '}');
        if (!close) break;
        struct fake_device *d = &devices[device_count];
        memset(d, 0, sizeof *d);
        d->index = device_count;
        get_string(p, close, "name", d->name, sizeof d->name);
        get_string(p, close, "pci_bus_id", d->bus_id, sizeof d->bus_id);
        get_string(p, close, "uuid", d->uuid, sizeof d->uuid);
        d->pci_device_id = (unsigned)get_int(p, close, "pci_device_id", 0);
        d->memory_total = (unsigned long long)get_int(p, close, "memory_total_mib", 0) << 20;
        d->memory_used = (unsigned long long)get_int(p, close, "memory_used_mib", 0) << 20;
        d->cc_major = (int)get_int(p, close, "cc_major", 0);
        d->cc_minor = (int)get_int(p, close, "cc_minor", 0);
        d->temperature_c = (unsigned)get_int(p, close, "temperature_c", 40);
        d->power_mw = (unsigned)get_int(p, close, "power_mw", 20000);
        d->power_limit_mw = (unsigned)get_int(p, close, "power_limit_mw", 0);
        d->num_fans = (unsigned)get_int(p, close, "num_fans", 0);
        d->lost = (int)get_int(p, close, "lost", 0);
        d->no_permission = (int)get_int(p, close, "no_permission", 0);
        d->auto_fan_speed = (int)get_int(p, close, "auto_fan_speed_pct", -1);
        if (d->num_fans > MAX_FANS) d->num_fans = MAX_FANS;
        d->fan_min = (unsigned)get_int(p, close, "fan_min_pct", 30);
        d->fan_max = (unsigned)get_int(p, close, "fan_max_pct", 100);
        for (unsigned f = 0; f < MAX_FANS; f++) d->fan_speed[f] = (unsigned)get_int(p, close, "fan_speed_pct", 30);
        device_count++;
        p = close;
    }
    free(json);
    return NVML_SUCCESS;
}

static void log_line(const char *fmt, unsigned a, unsigned b, unsigned c) {
    const char *path = getenv("FAKE_NVML_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, fmt, a, b, c);
    fclose(f);
}

static int valid(nvmlDevice_t d) {
    return initialised && d >= devices && d < devices + device_count;
}

static nvmlReturn_t copy_string(char *out, unsigned len, const char *value) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
    nvmlReturn_t r = load_config();
    initialised = (r == NVML_SUCCESS);
    return r;
}
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, driver_version);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *version = cuda_driver_version;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) { return nvmlSystemGetCudaDriverVersion_v2(version); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *count = device_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    return valid(d) ? copy_string(name, length, d->name) : NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    return valid(d) ? copy_string(uuid, length, d->uuid) : NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = d->memory_total;
    m->reserved = 0;
    m->used = d->memory_used;
    m->free = d->memory_total - d->memory_used;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    strncpy(p->busId, d->bus_id, sizeof p->busId - 1);
    strncpy(p->busIdLegacy, d->bus_id, sizeof p->busIdLegacy - 1);
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    sscanf(d->bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
    p->domain = domain;
    p->bus = bus;
    p->device = dev;
    p->pciDeviceId = d->pci_device_id;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp) {
    (void)sensor;
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temperature_c;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_mw;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->power_limit_mw == 0) return NVML_ERROR_NOT_SUPPORTED;
    *mw = d->power_limit_mw;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t d, unsigned int *fans) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->lost) return NVML_ERROR_GPU_IS_LOST;
    *fans = d->num_fans;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t d, unsigned int fan, unsigned int *speed) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (fan >= d->num_fans) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = d->fan_speed[fan];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinMaxFanSpeed(nvmlDevice_t d, unsigned int *min, unsigned int *max) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->num_fans == 0) return NVML_ERROR_NOT_SUPPORTED;
    *min = d->fan_min;
    *max = d->fan_max;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceSetFanSpeed_v2(nvmlDevice_t d, unsigned int fan, unsigned int speed) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->lost) return NVML_ERROR_GPU_IS_LOST;
    if (d->no_permission) return NVML_ERROR_NO_PERMISSION;
    if (fan >= d->num_fans || speed > 100) return NVML_ERROR_INVALID_ARGUMENT;
    d->fan_speed[fan] = speed;
    d->fan_manual[fan] = 1;
    log_line("set_fan_speed %u %u %u\n", d->index, fan, speed);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceSetDefaultFanSpeed_v2(nvmlDevice_t d, unsigned int fan) {
    if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->lost) return NVML_ERROR_GPU_IS_LOST;
    if (d->no_permission) return NVML_ERROR_NO_PERMISSION;
    if (fan >= d->num_fans) return NVML_ERROR_INVALID_ARGUMENT;
    d->fan_manual[fan] = 0;
    if (d->auto_fan_speed >= 0) d->fan_speed[fan] = (unsigned)d->auto_fan_speed;
    log_line("set_default_fan_speed %u %u%.0u\n", d->index, fan, 0);
    return NVML_SUCCESS;
}
