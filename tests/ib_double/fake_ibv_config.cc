// Configuration of the libibverbs test double (the environment, see README.md)
// and the identities it derives from (host, device, port).
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "fake_ibv_internal.h"

namespace theseus::fakeibv {
namespace {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t next = s.find(sep, pos);
    out.emplace_back(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) return out;
    pos = next + 1;
  }
}

bool parseUnsigned(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool parseDevice(const std::string& spec, DeviceConfig* dev) {
  std::vector<std::string> parts = split(spec, ':');
  dev->name = parts[0];
  if (dev->name.empty() || dev->name.size() >= IBV_SYSFS_NAME_MAX) {
    warn("THESEUS_FAKE_IBV_DEVICES: bad device name in '%s'", spec.c_str());
    return false;
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    size_t eq = parts[i].find('=');
    std::string key = parts[i].substr(0, eq);
    std::string value = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
    uint64_t n = 0;
    if (key == "ports" && parseUnsigned(value, &n) && n >= 1 && n <= 8) {
      dev->ports = static_cast<int>(n);
    } else if (key == "link" && (value == "ib" || value == "eth")) {
      dev->roce = value == "eth";
    } else if (key == "speed" && parseUnsigned(value, &n) && n >= 1000 && n <= 10000000) {
      dev->speedMbps = static_cast<int>(n);
    } else if (key == "mtu" && parseUnsigned(value, &n) && (n == 1024 || n == 2048 || n == 4096)) {
      dev->mtu = n == 1024 ? IBV_MTU_1024 : n == 2048 ? IBV_MTU_2048 : IBV_MTU_4096;
    } else {
      warn("THESEUS_FAKE_IBV_DEVICES: device '%s': bad setting '%s' (ignored)", dev->name.c_str(),
           parts[i].c_str());
    }
  }
  return true;
}

FaultConfig parseFaults(const char* text) {
  FaultConfig f;
  if (text == nullptr || *text == '\0') return f;
  for (const std::string& item : split(text, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    uint64_t n = 0;
    if (key == "reg_mr_fail" && eq == std::string::npos) {
      f.regMrFail = true;
    } else if (key == "no_dmabuf" && eq == std::string::npos) {
      f.noDmaBuf = true;
    } else if (key == "dmabuf_fail" && eq == std::string::npos) {
      f.dmaBufFail = true;
    } else if (key == "read_fail" && eq == std::string::npos) {
      f.readFail = true;
    } else if (key == "qp_error_after" && parseUnsigned(value, &n) && n > 0) {
      f.qpErrorAfter = n;
    } else if (key == "rem_access_after" && parseUnsigned(value, &n) && n > 0) {
      f.remAccessAfter = n;
    } else if (key == "cq_overrun_after" && parseUnsigned(value, &n) && n > 0) {
      f.cqOverrunAfter = n;
    } else {
      warn("THESEUS_FAKE_IBV_FAULT: unknown or malformed fault '%s' (ignored)", item.c_str());
    }
  }
  return f;
}

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hashText(const std::string& text) {  // FNV-1a, then mixed
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return mix(h);
}

}  // namespace

void fatal(const char* what) {
  fprintf(stderr, "fake-ibverbs: fatal: %s\n", what);
  abort();
}

void warn(const char* fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "fake-ibverbs[%d]: %s\n", static_cast<int>(getpid()), line);
}

Config readConfig() {
  Config cfg;
  const char* devices = getenv("THESEUS_FAKE_IBV_DEVICES");
  if (devices == nullptr) {
    cfg.devices.push_back(DeviceConfig{.name = "fake_mlx5_0"});
  } else if (*devices != '\0') {
    for (const std::string& spec : split(devices, ',')) {
      DeviceConfig dev;
      if (spec.empty() || !parseDevice(spec, &dev)) continue;
      bool duplicate = false;
      for (const DeviceConfig& d : cfg.devices) duplicate |= d.name == dev.name;
      if (duplicate) {
        warn("THESEUS_FAKE_IBV_DEVICES: device '%s' listed twice (second ignored)", dev.name.c_str());
        continue;
      }
      cfg.devices.push_back(dev);
    }
  }
  const char* host = getenv("THESEUS_FAKE_IBV_HOST");
  if (host != nullptr && *host != '\0') {
    cfg.host = host;
  } else {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) snprintf(name, sizeof(name), "localhost");
    cfg.host = name;
  }
  const char* dir = getenv("THESEUS_FAKE_IBV_DIR");
  cfg.dir = dir != nullptr && *dir != '\0' ? dir : "/tmp/theseus-fake-ibv";
  while (cfg.dir.size() > 1 && cfg.dir.back() == '/') cfg.dir.pop_back();
  cfg.faults = parseFaults(getenv("THESEUS_FAKE_IBV_FAULT"));
  return cfg;
}

uint64_t nodeGuid(const std::string& host, const std::string& device) {
  // The low 16 bits are left for the port's LID (see portGid).
  return (hashText(host + "/" + device) & ~0xffffULL) | 0x1000;
}

uint16_t portLid(const std::string& host, const std::string& device, int port) {
  // Unicast LIDs are 0x0001..0xbfff.
  return static_cast<uint16_t>(1 + hashText(host + "/" + device + "/" + std::to_string(port)) % 0xbfff);
}

int gidTableLen(bool roce) { return roce ? 4 : 1; }

// Index 0: fe80::<port GUID> where the port GUID is the node GUID with the port's LID in its low
// 16 bits; RoCE adds the same as v2 (1) and ::ffff:10.<lid high>.<lid low>.<port> as v1 (2) and v2
// (3). Every GID of a port therefore names its LID, which is how a requester finds the peer's socket.
bool portGid(const std::string& host, const DeviceConfig& dev, int port, int index, ibv_gid* gid,
             ibv_gid_type* type) {
  if (index < 0 || index >= gidTableLen(dev.roce)) return false;
  const uint16_t lid = portLid(host, dev.name, port);
  memset(gid, 0, sizeof(*gid));
  if (index <= 1) {
    const uint64_t portGuid = (nodeGuid(host, dev.name) & ~0xffffULL) | lid;
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    for (int i = 0; i < 8; ++i) gid->raw[8 + i] = static_cast<uint8_t>(portGuid >> (56 - 8 * i));
  } else {
    gid->raw[10] = 0xff;
    gid->raw[11] = 0xff;
    gid->raw[12] = 10;
    gid->raw[13] = static_cast<uint8_t>(lid >> 8);
    gid->raw[14] = static_cast<uint8_t>(lid);
    gid->raw[15] = static_cast<uint8_t>(port);
  }
  if (!dev.roce) {
    *type = IBV_GID_TYPE_IB;
  } else {
    *type = index == 0 || index == 2 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  }
  return true;
}

uint16_t lidFromGid(const ibv_gid& gid) {
  bool mapped = true;
  for (int i = 0; i < 10; ++i) mapped &= gid.raw[i] == 0;
  if (mapped && gid.raw[10] == 0xff && gid.raw[11] == 0xff)
    return static_cast<uint16_t>(gid.raw[13] << 8 | gid.raw[14]);
  if (gid.raw[0] == 0xfe && gid.raw[1] == 0x80) return static_cast<uint16_t>(gid.raw[14] << 8 | gid.raw[15]);
  return 0;
}

// The (lane speed, width) pair of the IB port-info encoding whose product is mbps, preferring 4x;
// the closest one below when none is exact.
void speedToIb(int mbps, uint8_t* activeSpeed, uint8_t* activeWidth) {
  static const struct {
    uint8_t bit;
    int mbps;
  } kLanes[] = {{128, 100000}, {64, 50000}, {32, 25000}, {16, 14000}, {4, 10000}, {2, 5000}, {1, 2500}};
  static const struct {
    uint8_t bit;
    int lanes;
  } kWidths[] = {{2, 4}, {1, 1}, {16, 2}, {4, 8}, {8, 12}};
  int best = -1;
  *activeSpeed = 1;
  *activeWidth = 1;
  for (const auto& w : kWidths) {
    for (const auto& l : kLanes) {
      const int total = l.mbps * w.lanes;
      if (total == mbps) {
        *activeSpeed = l.bit;
        *activeWidth = w.bit;
        return;
      }
      if (total < mbps && total > best) {
        best = total;
        *activeSpeed = l.bit;
        *activeWidth = w.bit;
      }
    }
  }
}

}  // namespace theseus::fakeibv
