// What our ARM64 paths ask of the CPU at run time: the dot-product extension (sdot), and the FPCR
// register whose FZ bit flushes denormals as MXCSR's FTZ/DAZ do on x86.
#pragma once

#if defined(__aarch64__)
#    include <stdint.h>
#    if defined(__linux__)
#        include <sys/auxv.h>
#    endif

namespace assistant_arm {

inline bool has_dotprod() {
#    if defined(__APPLE__)
    return true;  // every Apple Silicon core has it
#    elif defined(__linux__)
    constexpr unsigned long kAsimdDotProduct = 1ul << 20;  // HWCAP_ASIMDDP
    return (getauxval(AT_HWCAP) & kAsimdDotProduct) != 0;
#    else
    return false;
#    endif
}

inline uint64_t fpcr() {
    uint64_t value;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(value));
    return value;
}

inline void set_fpcr(uint64_t value) { __asm__ __volatile__("msr fpcr, %0" : : "r"(value)); }

}  // namespace assistant_arm
#endif
