/*
 * The NVML types, constants and struct layouts the fake library answers with.
 *
 * Written for fakehw from the public ABI facts (names, numbers, sizes and field order; see
 * docs/nvml.md). Only what the shim uses is declared. tests/nvml/test_abi.py compiles the same probe
 * program against this header and against Debian's libnvidia-ml-dev nvml.h and compares every size and
 * offset, so a mistake here cannot go unnoticed.
 */
#ifndef FAKEHW_NVML_ABI_H
#define FAKEHW_NVML_ABI_H

#include <stdint.h>

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlUnit_st *nvmlUnit_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))

/* Buffer sizes. */
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_PART_NUMBER_BUFFER_SIZE 80
#define NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE 32
#define NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE 16
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_GPU_FABRIC_UUID_LEN 16
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_MAX_PHYSICAL_BRIDGE 128
#define NVML_MAX_THERMAL_SENSORS_PER_GPU 3
#define NVML_MAX_GPU_PERF_PSTATES 16
#define NVML_MAX_GPU_UTILIZATIONS 8
#define NVML_VALUE_NOT_AVAILABLE (-1)

/* PCI. */
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* The layout the unversioned and _v2 entry points fill: 16-byte bus id, ids, four reserved words. */
typedef struct fhwPciInfoV1_st {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} fhwPciInfoV1_t;

typedef struct nvmlPciInfoExt_v1_st {
    unsigned int version;
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int baseClass;
    unsigned int subClass;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfoExt_v1_t;
#define nvmlPciInfoExt_v1 NVML_STRUCT_VERSION(sizeof(nvmlPciInfoExt_v1_t), 1)

typedef enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 } nvmlPcieUtilCounter_t;
typedef unsigned int nvmlBusType_t;
#define NVML_BUS_TYPE_PCIE 2

/* Memory. */
typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct nvmlBAR1Memory_st {
    unsigned long long bar1Total;
    unsigned long long bar1Free;
    unsigned long long bar1Used;
} nvmlBAR1Memory_t;

/* Processes. */
typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_v2_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef nvmlProcessInfo_v2_t nvmlProcessInfo_t;

typedef struct nvmlProcessUtilizationSample_st {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* Utilization, ECC, attributes. */
typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlEccErrorCounts_st {
    unsigned long long l1Cache;
    unsigned long long l2Cache;
    unsigned long long deviceMemory;
    unsigned long long registerFile;
} nvmlEccErrorCounts_t;

typedef struct nvmlDeviceAttributes_st {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct nvmlRowRemapperHistogramValues_st {
    unsigned int max;
    unsigned int high;
    unsigned int partial;
    unsigned int low;
    unsigned int none;
} nvmlRowRemapperHistogramValues_t;

typedef enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 } nvmlMemoryErrorType_t;
typedef enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 } nvmlEccCounterType_t;
typedef enum {
    NVML_MEMORY_LOCATION_L1_CACHE = 0,
    NVML_MEMORY_LOCATION_L2_CACHE = 1,
    NVML_MEMORY_LOCATION_DEVICE_MEMORY = 2,
    NVML_MEMORY_LOCATION_REGISTER_FILE = 3,
    NVML_MEMORY_LOCATION_TEXTURE_MEMORY = 4,
    NVML_MEMORY_LOCATION_TEXTURE_SHM = 5,
    NVML_MEMORY_LOCATION_CBU = 6,
    NVML_MEMORY_LOCATION_SRAM = 7,
    NVML_MEMORY_LOCATION_COUNT = 8
} nvmlMemoryLocation_t;
typedef enum {
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
} nvmlPageRetirementCause_t;

/* NVLink. */
typedef enum {
    NVML_NVLINK_CAP_P2P_SUPPORTED = 0,
    NVML_NVLINK_CAP_SYSMEM_ACCESS = 1,
    NVML_NVLINK_CAP_P2P_ATOMICS = 2,
    NVML_NVLINK_CAP_SYSMEM_ATOMICS = 3,
    NVML_NVLINK_CAP_SLI_BRIDGE = 4,
    NVML_NVLINK_CAP_VALID = 5,
    NVML_NVLINK_CAP_COUNT = 6
} nvmlNvLinkCapability_t;
typedef enum { NVML_NVLINK_ERROR_COUNT = 5 } nvmlNvLinkErrorCounter_t;
typedef enum {
    NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;
typedef enum { NVML_NVLINK_COUNTER_UNIT_CYCLES = 0, NVML_NVLINK_COUNTER_UNIT_RESERVED = 3 } nvmlNvLinkUtilizationCountUnits_t;
typedef enum { NVML_NVLINK_COUNTER_PKTFILTER_ALL = 0xFF } nvmlNvLinkUtilizationCountPktTypes_t;
typedef struct nvmlNvLinkUtilizationControl_st {
    nvmlNvLinkUtilizationCountUnits_t units;
    nvmlNvLinkUtilizationCountPktTypes_t pktfilter;
} nvmlNvLinkUtilizationControl_t;

/* Topology. */
typedef enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;
typedef enum { NVML_P2P_STATUS_OK = 0, NVML_P2P_STATUS_NOT_SUPPORTED = 5, NVML_P2P_STATUS_UNKNOWN = 6 } nvmlGpuP2PStatus_t;
typedef enum { NVML_P2P_CAPS_INDEX_READ = 0, NVML_P2P_CAPS_INDEX_PROP = 4, NVML_P2P_CAPS_INDEX_UNKNOWN = 5 } nvmlGpuP2PCapsIndex_t;
typedef enum { NVML_AFFINITY_SCOPE_NODE = 0, NVML_AFFINITY_SCOPE_SOCKET = 1 } nvmlAffinityScope_t;

typedef struct nvmlBridgeChipInfo_st {
    unsigned int type;
    unsigned int fwVersion;
} nvmlBridgeChipInfo_t;
typedef struct nvmlBridgeChipHierarchy_st {
    unsigned char bridgeCount;
    nvmlBridgeChipInfo_t bridgeChipInfo[NVML_MAX_PHYSICAL_BRIDGE];
} nvmlBridgeChipHierarchy_t;

/* Fabric (R535 keeps the plain struct; the versioned forms are the later headers' layouts). */
typedef unsigned char nvmlGpuFabricState_t;
#define NVML_GPU_FABRIC_STATE_NOT_SUPPORTED 0
#define NVML_GPU_FABRIC_STATE_NOT_STARTED 1
#define NVML_GPU_FABRIC_STATE_IN_PROGRESS 2
#define NVML_GPU_FABRIC_STATE_COMPLETED 3
typedef struct nvmlGpuFabricInfo_st {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;
typedef struct nvmlGpuFabricInfo_v2_st {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
typedef struct nvmlGpuFabricInfo_v3_st {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v2_t), 2)
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v3_t), 3)

/* Events. */
typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;
/* What the unversioned nvmlEventSetWait fills: no instance ids. */
typedef struct fhwEventDataV1_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
} fhwEventDataV1_t;

#define nvmlEventTypeSingleBitEccError 0x0000000000000001ULL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002ULL
#define nvmlEventTypePState 0x0000000000000004ULL
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
#define nvmlEventTypeClock 0x0000000000000010ULL
#define nvmlEventTypePowerSourceChange 0x0000000000000080ULL
#define nvmlEventMigConfigChange 0x0000000000000100ULL

/* Clocks, throttle reasons, thermal, power. */
typedef enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3, NVML_CLOCK_COUNT = 4 } nvmlClockType_t;
typedef enum {
    NVML_CLOCK_ID_CURRENT = 0,
    NVML_CLOCK_ID_APP_CLOCK_TARGET = 1,
    NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2,
    NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3,
    NVML_CLOCK_ID_COUNT = 4
} nvmlClockId_t;
typedef enum { NVML_PSTATE_0 = 0, NVML_PSTATE_15 = 15, NVML_PSTATE_UNKNOWN = 32 } nvmlPstates_t;
typedef enum {
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0,
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1,
    NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2,
    NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
} nvmlTemperatureThresholds_t;
typedef enum { NVML_TEMPERATURE_GPU = 0, NVML_TEMPERATURE_GPU_MAX = 1, NVML_TEMPERATURE_COUNT = 2 } nvmlTemperatureSensors_t;
typedef struct {
    unsigned int count;
    struct {
        int controller;
        int defaultMinTemp;
        int defaultMaxTemp;
        int currentTemp;
        int target;
    } sensor[NVML_MAX_THERMAL_SENSORS_PER_GPU];
} nvmlGpuThermalSettings_t;
#define NVML_THERMAL_CONTROLLER_GPU_INTERNAL 1
#define NVML_THERMAL_TARGET_GPU 1
#define NVML_THERMAL_TARGET_ALL 15

typedef struct nvmlGpuDynamicPstatesInfo_st {
    unsigned int flags;
    struct {
        unsigned int bIsPresent;
        unsigned int percentage;
        unsigned int incThreshold;
        unsigned int decThreshold;
    } utilization[NVML_MAX_GPU_UTILIZATIONS];
} nvmlGpuDynamicPstatesInfo_t;

typedef struct nvmlViolationTime_st {
    unsigned long long referenceTime;
    unsigned long long violationTime;
} nvmlViolationTime_t;

typedef struct nvmlClkMonFaultInfo_struct {
    unsigned int clkApiDomain;
    unsigned int clkDomainFaultMask;
} nvmlClkMonFaultInfo_t;
typedef struct nvmlClkMonStatus_status {
    unsigned int bGlobalStatus;
    unsigned int clkMonListSize;
    nvmlClkMonFaultInfo_t clkMonList[32];
} nvmlClkMonStatus_t;

/* Field values. */
typedef enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
} nvmlValueType_t;
typedef union nvmlValue_st {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;     /* later headers */
    unsigned short usVal; /* later headers */
} nvmlValue_t;
typedef struct nvmlFieldValue_st {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;
typedef struct nvmlSample_st {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;

/* Encoder / FBC statistics (always zero sessions here). */
typedef struct nvmlFBCStats_st {
    unsigned int sessionsCount;
    unsigned int averageFPS;
    unsigned int averageLatency;
} nvmlFBCStats_t;

/* Excluded devices and units. */
typedef struct nvmlExcludedDeviceInfo_st {
    nvmlPciInfo_t pciInfo;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
} nvmlExcludedDeviceInfo_t;

/* MIG. */
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1
/* The newest header's counts (CUDA 13): profile indices below them that a GPU does not offer answer NOT_SUPPORTED,
   so callers built against any header (535's nvidia-smi asks index 8 and 9) get the real answer. */
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define NVML_GPU_INSTANCE_PROFILE_CAPS_P2P 0x1

typedef struct nvmlGpuInstancePlacement_st {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceProfileInfo_v2_st {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2)

/* v3 drops isP2pSupported for a capabilities bit field. */
typedef struct nvmlGpuInstanceProfileInfo_v3_st {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;
#define nvmlGpuInstanceProfileInfo_v3 NVML_STRUCT_VERSION(sizeof(nvmlGpuInstanceProfileInfo_v3_t), 3)

typedef struct nvmlGpuInstanceInfo_st {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
    unsigned int start;
    unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_v2_st {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlComputeInstanceProfileInfo_v2_t), 2)

typedef struct nvmlComputeInstanceProfileInfo_v3_st {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;
#define nvmlComputeInstanceProfileInfo_v3 NVML_STRUCT_VERSION(sizeof(nvmlComputeInstanceProfileInfo_v3_t), 3)

/* What nvmlComputeInstanceGetInfo (unversioned) fills: no placement. */
typedef struct fhwComputeInstanceInfoV1_st {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
} fhwComputeInstanceInfoV1_t;
typedef struct nvmlComputeInstanceInfo_st {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* Field ids the shim answers (the 535 header's numbering). */
#define NVML_FI_DEV_ECC_CURRENT 1
#define NVML_FI_DEV_ECC_PENDING 2
#define NVML_FI_DEV_ECC_SBE_VOL_TOTAL 3
#define NVML_FI_DEV_ECC_DBE_VOL_TOTAL 4
#define NVML_FI_DEV_ECC_SBE_AGG_TOTAL 5
#define NVML_FI_DEV_ECC_DBE_AGG_TOTAL 6
#define NVML_FI_DEV_ECC_SBE_VOL_L1 7
#define NVML_FI_DEV_ECC_DBE_AGG_CBU 28
#define NVML_FI_DEV_RETIRED_SBE 29
#define NVML_FI_DEV_RETIRED_DBE 30
#define NVML_FI_DEV_RETIRED_PENDING 31
#define NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0 32
#define NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL 38
#define NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0 39
#define NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL 45
#define NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0 46
#define NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL 52
#define NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0 53
#define NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL 59
#define NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L0 60
#define NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL 66
#define NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L0 67
#define NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL 73
#define NVML_FI_DEV_PERF_POLICY_POWER 74
#define NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS 81
#define NVML_FI_DEV_MEMORY_TEMP 82
#define NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION 83
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_L0 84
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_L5 89
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON 90
#define NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define NVML_FI_DEV_RETIRED_PENDING_SBE 92
#define NVML_FI_DEV_RETIRED_PENDING_DBE 93
#define NVML_FI_DEV_PCIE_REPLAY_COUNTER 94
#define NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER 95
#define NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6 96
#define NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6 102
#define NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6 108
#define NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6 114
#define NVML_FI_DEV_NVLINK_BANDWIDTH_C0_L6 120
#define NVML_FI_DEV_NVLINK_BANDWIDTH_C1_L6 126
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_L6 132
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX 138
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX 139
#define NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX 140
#define NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX 141
#define NVML_FI_DEV_REMAPPED_COR 142
#define NVML_FI_DEV_REMAPPED_UNC 143
#define NVML_FI_DEV_REMAPPED_PENDING 144
#define NVML_FI_DEV_REMAPPED_FAILURE 145
#define NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID 146
#define NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT 147
#define NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0 148
#define NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L11 159
#define NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL 160
#define NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY 161
#define NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY 162
#define NVML_FI_DEV_NVLINK_ERROR_DL_CRC 163
#define NVML_FI_DEV_NVLINK_GET_SPEED 164
#define NVML_FI_DEV_NVLINK_GET_STATE 165
#define NVML_FI_DEV_NVLINK_GET_VERSION 166

/* ------------------------------------------------------------------------------------------------------------------
 * Types of later headers (550 ... 615), from the public nvml.h of each branch (PyPI nvidia-nvml-dev 13.4.92 is the
 * newest). tests/nvml/test_abi.py compiles the same probe against that header and against this one.
 * ---------------------------------------------------------------------------------------------------------------- */

typedef struct nvmlSystemEventSet_st *nvmlSystemEventSet_t;
typedef unsigned int nvmlVgpuTypeId_t;
typedef unsigned int nvmlVgpuInstance_t;

#define NVML_DEVICE_UUID_ASCII_LEN 41
#define NVML_DEVICE_UUID_BINARY_LEN 16
#define NVML_PERF_MODES_BUFFER_SIZE 2048
#define NVML_NVLINK_TOTAL_SUPPORTED_BW_MODES 23
#define NVML_NVLINK_FIRMWARE_VERSION_LENGTH 100
#define NVML_255_MASK_NUM_ELEMS 8
#define NVML_WORKLOAD_POWER_MAX_PROFILES 255
#define NVML_DEVICE_HOSTNAME_BUFFER_SIZE 64
#define NVML_GPU_FABRIC_CLIQUE_MAX 64
#define NVML_GSP_FIRMWARE_VERSION_BUF_SIZE 0x40

typedef struct {
    unsigned int isC2cEnabled;
} nvmlC2cModeInfo_v1_t;

typedef enum { NVML_DEVICE_ADDRESSING_MODE_NONE = 0, NVML_DEVICE_ADDRESSING_MODE_HMM = 1,
               NVML_DEVICE_ADDRESSING_MODE_ATS = 2 } nvmlDeviceAddressingModeType_t;
typedef struct {
    unsigned int version;
    unsigned int value;
} nvmlDeviceAddressingMode_v1_t;
#define nvmlDeviceAddressingMode_v1 NVML_STRUCT_VERSION(sizeof(nvmlDeviceAddressingMode_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned int bChannelRepairPending;
    unsigned int bTpcRepairPending;
} nvmlRepairStatus_v1_t;
#define nvmlRepairStatus_v1 NVML_STRUCT_VERSION(sizeof(nvmlRepairStatus_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned long long value;
} nvmlPdi_v1_t;
#define nvmlPdi_v1 NVML_STRUCT_VERSION(sizeof(nvmlPdi_v1_t), 1)

typedef struct {
    unsigned int version;
    nvmlEnableState_t encryptionState;
} nvmlDramEncryptionInfo_v1_t;
#define nvmlDramEncryptionInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlDramEncryptionInfo_v1_t), 1)

typedef struct {
    unsigned int version;
    int marginTemperature;
} nvmlMarginTemperature_v1_t;
#define nvmlMarginTemperature_v1 NVML_STRUCT_VERSION(sizeof(nvmlMarginTemperature_v1_t), 1)

typedef struct {
    unsigned int version;
    nvmlClockType_t type;
    nvmlPstates_t pstate;
    int clockOffsetMHz;
    int minClockOffsetMHz;
    int maxClockOffsetMHz;
} nvmlClockOffset_v1_t;
#define nvmlClockOffset_v1 NVML_STRUCT_VERSION(sizeof(nvmlClockOffset_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned int fan;
    unsigned int speed;
} nvmlFanSpeedInfo_v1_t;
#define nvmlFanSpeedInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlFanSpeedInfo_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned int index;
    unsigned int signalType;
    unsigned int target;
} nvmlCoolerInfo_v1_t;
#define nvmlCoolerInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlCoolerInfo_v1_t), 1)

typedef struct {
    unsigned int version;
    char str[NVML_PERF_MODES_BUFFER_SIZE];
} nvmlDevicePerfModes_v1_t;
#define nvmlDevicePerfModes_v1 NVML_STRUCT_VERSION(sizeof(nvmlDevicePerfModes_v1_t), 1)
typedef nvmlDevicePerfModes_v1_t nvmlDeviceCurrentClockFreqs_v1_t;
#define nvmlDeviceCurrentClockFreqs_v1 NVML_STRUCT_VERSION(sizeof(nvmlDeviceCurrentClockFreqs_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned long long aggregateUncParity;
    unsigned long long aggregateUncSecDed;
    unsigned long long aggregateCor;
    unsigned long long volatileUncParity;
    unsigned long long volatileUncSecDed;
    unsigned long long volatileCor;
    unsigned long long aggregateUncBucketL2;
    unsigned long long aggregateUncBucketSm;
    unsigned long long aggregateUncBucketPcie;
    unsigned long long aggregateUncBucketMcu;
    unsigned long long aggregateUncBucketOther;
    unsigned int bThresholdExceeded;
} nvmlEccSramErrorStatus_v1_t;
#define nvmlEccSramErrorStatus_v1 NVML_STRUCT_VERSION(sizeof(nvmlEccSramErrorStatus_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char rackGuid[16];
    unsigned char chassisPhysicalSlotNumber;
    unsigned char computeSlotIndex;
    unsigned char nodeIndex;
    unsigned char peerType;
    unsigned char moduleId;
} nvmlPlatformInfo_v1_t;
#define nvmlPlatformInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlPlatformInfo_v1_t), 1)
typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber;
    unsigned char trayIndex;
    unsigned char hostId;
    unsigned char peerType;
    unsigned char moduleId;
} nvmlPlatformInfo_v2_t;
#define nvmlPlatformInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlPlatformInfo_v2_t), 2)

typedef struct {
    unsigned int unit;
    unsigned int location;
    unsigned int sublocation;
    unsigned int extlocation;
    unsigned int address;
    unsigned int isParity;
    unsigned int count;
} nvmlEccSramUniqueUncorrectedErrorEntry_v1_t;
typedef struct {
    unsigned int version;
    unsigned int entryCount;
    nvmlEccSramUniqueUncorrectedErrorEntry_v1_t *entries;
} nvmlEccSramUniqueUncorrectedErrorCounts_v1_t;
#define nvmlEccSramUniqueUncorrectedErrorCounts_v1 \
    NVML_STRUCT_VERSION(sizeof(nvmlEccSramUniqueUncorrectedErrorCounts_v1_t), 1)

typedef struct {
    unsigned int version;
    char branch[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
} nvmlSystemDriverBranchInfo_v1_t;
#define nvmlSystemDriverBranchInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlSystemDriverBranchInfo_v1_t), 1)

typedef struct {
    unsigned int version;
    nvmlTemperatureSensors_t sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(sizeof(nvmlTemperature_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned char bwModes[NVML_NVLINK_TOTAL_SUPPORTED_BW_MODES];
    unsigned char totalBwModes;
} nvmlNvlinkSupportedBwModes_v1_t;
#define nvmlNvlinkSupportedBwModes_v1 NVML_STRUCT_VERSION(sizeof(nvmlNvlinkSupportedBwModes_v1_t), 1)
typedef struct {
    unsigned int version;
    unsigned int bIsBest;
    unsigned char bwMode;
} nvmlNvlinkGetBwMode_v1_t;
#define nvmlNvlinkGetBwMode_v1 NVML_STRUCT_VERSION(sizeof(nvmlNvlinkGetBwMode_v1_t), 1)

typedef struct {
    unsigned char ucodeType;
    unsigned int major;
    unsigned int minor;
    unsigned int subMinor;
} nvmlNvlinkFirmwareVersion_t;
typedef struct {
    nvmlNvlinkFirmwareVersion_t firmwareVersion[NVML_NVLINK_FIRMWARE_VERSION_LENGTH];
    unsigned int numValidEntries;
} nvmlNvlinkFirmwareInfo_t;
typedef struct {
    unsigned int version;
    unsigned int isNvleEnabled;
} nvmlNvLinkInfo_v1_t;
typedef struct {
    unsigned int version;
    unsigned int isNvleEnabled;
    nvmlNvlinkFirmwareInfo_t firmwareInfo;
} nvmlNvLinkInfo_v2_t;
#define nvmlNvLinkInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlNvLinkInfo_v1_t), 1)
#define nvmlNvLinkInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlNvLinkInfo_v2_t), 2)

typedef struct {
    unsigned int version;
    unsigned int capMask;
} nvmlDeviceCapabilities_v1_t;
#define nvmlDeviceCapabilities_v1 NVML_STRUCT_VERSION(sizeof(nvmlDeviceCapabilities_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned int mode;
} nvmlVgpuHeterogeneousMode_v1_t;
#define nvmlVgpuHeterogeneousMode_v1 NVML_STRUCT_VERSION(sizeof(nvmlVgpuHeterogeneousMode_v1_t), 1)

typedef struct {
    unsigned int version;
    unsigned int environment;
    unsigned int ccFeature;
    unsigned int devToolsMode;
    unsigned int multiGpuMode;
} nvmlSystemConfComputeSettings_v1_t;
#define nvmlSystemConfComputeSettings_v1 NVML_STRUCT_VERSION(sizeof(nvmlSystemConfComputeSettings_v1_t), 1)
typedef struct {
    unsigned int environment;
    unsigned int ccFeature;
    unsigned int devToolsMode;
} nvmlConfComputeSystemState_t;
typedef struct {
    unsigned int cpuCaps;
    unsigned int gpusCaps;
} nvmlConfComputeSystemCaps_t;
typedef struct {
    unsigned long long protectedMemSizeKib;
    unsigned long long unprotectedMemSizeKib;
} nvmlConfComputeMemSizeInfo_t;
typedef struct {
    unsigned int version;
    unsigned long long attackerAdvantage;
} nvmlConfComputeGetKeyRotationThresholdInfo_v1_t;
#define nvmlConfComputeGetKeyRotationThresholdInfo_v1 \
    NVML_STRUCT_VERSION(sizeof(nvmlConfComputeGetKeyRotationThresholdInfo_v1_t), 1)

typedef struct {
    unsigned long long timeStamp;
    unsigned int pid;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
    unsigned int jpgUtil;
    unsigned int ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;
typedef struct {
    unsigned int version;
    unsigned int processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_v1_t;
#define nvmlProcessesUtilizationInfo_v1 NVML_STRUCT_VERSION(sizeof(nvmlProcessesUtilizationInfo_v1_t), 1)

typedef struct {
    unsigned int mask[NVML_255_MASK_NUM_ELEMS];
} nvmlMask255_t;
typedef struct {
    unsigned int version;
    unsigned int profileId;
    unsigned int priority;
    nvmlMask255_t conflictingMask;
} nvmlWorkloadPowerProfileInfo_v1_t;
typedef struct {
    unsigned int version;
    nvmlMask255_t perfProfilesMask;
    nvmlWorkloadPowerProfileInfo_v1_t perfProfile[NVML_WORKLOAD_POWER_MAX_PROFILES];
} nvmlWorkloadPowerProfileProfilesInfo_v1_t;
typedef struct {
    unsigned int version;
    nvmlMask255_t perfProfilesMask;
    nvmlMask255_t requestedProfilesMask;
    nvmlMask255_t enforcedProfilesMask;
} nvmlWorkloadPowerProfileCurrentProfiles_v1_t;
#define nvmlWorkloadPowerProfileCurrentProfiles_v1 \
    NVML_STRUCT_VERSION(sizeof(nvmlWorkloadPowerProfileCurrentProfiles_v1_t), 1)
#define nvmlWorkloadPowerProfileProfilesInfo_v1 \
    NVML_STRUCT_VERSION(sizeof(nvmlWorkloadPowerProfileProfilesInfo_v1_t), 1)

typedef struct {
    unsigned int version;
    nvmlEnableState_t state;
} nvmlPowerSmoothingState_v1_t;

typedef struct {
    unsigned int bUnrepairableMemory;
} nvmlUnrepairableMemoryStatus_v1_t;

typedef struct {
    char value[NVML_DEVICE_HOSTNAME_BUFFER_SIZE];
} nvmlHostname_v1_t;

typedef struct {
    unsigned int corrActiveRemaps;
    unsigned int corrInactiveRemaps;
    unsigned int uncActiveRemaps;
    unsigned int uncInactiveRemaps;
    unsigned int bPending;
    unsigned int bFailureOccurred;
} nvmlRemappedRowsInfo_v2_t;

typedef struct {
    unsigned int maxSpareGroupCount;
    unsigned int noSpareGroupCount;
} nvmlEccBankRemapperHistogram_v1_t;
typedef struct {
    unsigned int activeRemappings;
    unsigned int inactiveRemappings;
    unsigned int bPending;
    nvmlEccBankRemapperHistogram_v1_t histogram;
} nvmlEccBankRemapperStatus_v1_t;

typedef struct {
    unsigned int timeRun;
} nvmlBBXTimeData_v1_t;

typedef struct {
    unsigned char type;
    unsigned int id;
} nvmlGpuFabricClique_v1_t;
typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    nvmlGpuFabricClique_v1_t cliques[NVML_GPU_FABRIC_CLIQUE_MAX];
    unsigned int numCliques;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v4_t;

typedef struct {
    unsigned int version;
    unsigned int type;
    union {
        char str[NVML_DEVICE_UUID_ASCII_LEN];
        unsigned char bytes[NVML_DEVICE_UUID_BINARY_LEN];
    } value;
} nvmlUUID_v1_t;
#define nvmlUUID_v1 NVML_STRUCT_VERSION(sizeof(nvmlUUID_v1_t), 1)
#define NVML_UUID_TYPE_ASCII 1
#define NVML_UUID_TYPE_BINARY 2

typedef struct {
    unsigned int version;
    nvmlSystemEventSet_t set;
} nvmlSystemEventSetCreateRequest_v1_t;
typedef nvmlSystemEventSetCreateRequest_v1_t nvmlSystemEventSetFreeRequest_v1_t;
typedef struct {
    unsigned int version;
    unsigned long long eventTypes;
    nvmlSystemEventSet_t set;
} nvmlSystemRegisterEventRequest_v1_t;
typedef struct {
    unsigned long long eventType;
    unsigned int gpuId;
} nvmlSystemEventData_v1_t;
typedef struct {
    unsigned int version;
    unsigned int timeoutms;
    nvmlSystemEventSet_t set;
    nvmlSystemEventData_v1_t *data;
    unsigned int dataSize;
    unsigned int numEvent;
} nvmlSystemEventSetWaitRequest_v1_t;
#define nvmlSystemEventSetCreateRequest_v1 NVML_STRUCT_VERSION(sizeof(nvmlSystemEventSetCreateRequest_v1_t), 1)
#define nvmlSystemEventSetFreeRequest_v1 NVML_STRUCT_VERSION(sizeof(nvmlSystemEventSetFreeRequest_v1_t), 1)
#define nvmlSystemRegisterEventRequest_v1 NVML_STRUCT_VERSION(sizeof(nvmlSystemRegisterEventRequest_v1_t), 1)
#define nvmlSystemEventSetWaitRequest_v1 NVML_STRUCT_VERSION(sizeof(nvmlSystemEventSetWaitRequest_v1_t), 1)
#define nvmlSystemEventTypeGpuDriverUnbind 0x0000000000000001ULL
#define nvmlSystemEventTypeGpuDriverBind 0x0000000000000002ULL

typedef struct {
    unsigned int timeoutMs;
    unsigned int dataType;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char sourceModule[16];
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned long long groupCursor;
    unsigned long long instanceId;
    unsigned long long timestampUsec;
    unsigned long long traceId;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned int severity;
    unsigned int categoryId;
    unsigned int moduleEventCode;
    unsigned int scope;
    unsigned int originator;
    unsigned int moduleInstance;
    unsigned int chipletId;
    unsigned int logLevel;
    unsigned int attributes;
    unsigned int groupCperSize;
    unsigned int groupAttributes;
    unsigned char groupSize;
    unsigned char groupIndex;
} nvmlEventSetWait_v3_t;

#define NVML_POWER_SCOPE_GPU 0U
#define NVML_POWER_SCOPE_MODULE 1U
#define NVML_POWER_SCOPE_MEMORY 2U
#define NVML_POWER_SCOPE_GPU_BASE 3U
#define NVML_POWER_SCOPE_COUNT 4U

/* GPM (535 API). */
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;
#define NVML_GPM_METRIC_MAX 477 /* the newest header's; a caller of an older branch passes a shorter array,
                                  so numMetrics is checked against the snapshot branch's maximum */
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;
#define NVML_GPM_METRICS_GET_VERSION 1
typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;
#define NVML_GPM_SUPPORT_VERSION 1

#endif
