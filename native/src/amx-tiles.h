// What our AMX paths share: the tile configuration block LDTILECFG reads, and Linux's permission to use
// the tile registers.
#pragma once

#if defined(__x86_64__) && defined(__linux__)
#    define ASSISTANT_AMX 1
#    include <stdint.h>
#    include <sys/syscall.h>
#    include <unistd.h>

namespace assistant_amx {

struct TileConfig {
    uint8_t  palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t  rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads a 64-byte block");

// GCC's _tile_loadconfig (12 and 13 at least) tells the compiler that LDTILECFG reads 8 bytes of the
// block, so it may drop the stores to the rest as dead and the first tile load faults. This one names all
// 64 bytes.
inline void load_config(const TileConfig & config) { asm volatile("ldtilecfg %0" : : "m"(config)); }

// GCC's tile loads do not say that they read memory either: vector stores into a buffer that a tile load
// reads next must not be moved past it.
inline void tile_loads_see_stores() { asm volatile("" : : : "memory"); }

// Linux hands out the AMX register state only to processes that ask for it (asking twice is harmless).
inline bool permitted() {
    constexpr long kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kTileData          = 18;      // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
}

}  // namespace assistant_amx
#endif
