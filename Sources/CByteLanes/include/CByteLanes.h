#ifndef OFFLINEPKG_CBYTELANES_H
#define OFFLINEPKG_CBYTELANES_H

// Sixteen bytes of a URL tested at once, for the normaliser's fast path (LookupURL.swift). Swift's
// SIMD types cannot do this: their lane comparisons compile to a loop over the lanes, and they have no
// movemask. Here SSE2 (every x86-64, and 32-bit x86 built for it) does it in one compare per byte
// class and one `pmovmskb`; elsewhere the same masks come from two 64-bit words (SWAR).
//
// Every mask has bit k set when byte k of the block (`in[k]`, k = 0...15) is of its class, and no
// other bit. `cbytelanes_scan_*_portable` are the SWAR versions, compiled on every platform, so the
// tests can compare the two on the machine that runs them.
//
// Static inline and always inlined: the normaliser's loops make no call per block (LLVM's own
// judgement left the scans outlined in the normaliser, which is large).

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define CBYTELANES_INLINE static inline __attribute__((always_inline))

/// What a block of the host tells: where it ends, and whether it needs the careful path.
typedef struct {
    /// "/", "?", "#" and ":": the end of the host.
    uint32_t ends;
    /// "@" (userinfo) and "[" (an IPv6 literal).
    uint32_t unusual;
} cbytelanes_host;

/// What a block of the path tells.
typedef struct {
    /// "?" and "#": the end of the path.
    uint32_t ends;
    uint32_t slashes;
    uint32_t dots;
    uint32_t percents;
} cbytelanes_path;

// --- Portable: two little-endian 64-bit words ------------------------------------------------------

CBYTELANES_INLINE uint64_t cbytelanes_word(const uint8_t *in) {
    uint64_t word;
    memcpy(&word, in, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    return word;
}

/// Bit 8k+7 for each byte k of `word` equal to `byte`; exact in every lane (no borrow across lanes).
CBYTELANES_INLINE uint64_t cbytelanes_equal64(uint64_t word, uint8_t byte) {
    uint64_t difference = word ^ (0x0101010101010101ull * byte);
    uint64_t low7 = 0x7f7f7f7f7f7f7f7full;
    return ~(((difference & low7) + low7) | difference) & 0x8080808080808080ull;
}

/// Bit 8k+7 for each ASCII uppercase byte k of `word`.
CBYTELANES_INLINE uint64_t cbytelanes_upper64(uint64_t word) {
    uint64_t seven = word & 0x7f7f7f7f7f7f7f7full;
    uint64_t at_least_a = seven + 0x0101010101010101ull * (0x80 - 0x41);
    uint64_t above_z = seven + 0x0101010101010101ull * (0x80 - 0x5b);
    return at_least_a & ~above_z & ~word & 0x8080808080808080ull;
}

/// A lane mask (bits 8k+7) gathered into eight bits (bit k): each byte's bit moves to the top byte
/// through one multiply, with no carry between them.
CBYTELANES_INLINE uint32_t cbytelanes_gather64(uint64_t lanes) {
    return (uint32_t)(((lanes >> 7) * 0x0102040810204080ull) >> 56);
}

CBYTELANES_INLINE void cbytelanes_store_word(uint8_t *out, uint64_t word) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    memcpy(out, &word, 8);
}

CBYTELANES_INLINE cbytelanes_host cbytelanes_scan_host_portable(const uint8_t *in, uint8_t *out) {
    cbytelanes_host result = {0, 0};
    for (int half = 0; half < 2; half++) {
        uint64_t word = cbytelanes_word(in + 8 * half);
        uint64_t ends = cbytelanes_equal64(word, '/') | cbytelanes_equal64(word, '?') | cbytelanes_equal64(word, '#')
            | cbytelanes_equal64(word, ':');
        uint64_t unusual = cbytelanes_equal64(word, '@') | cbytelanes_equal64(word, '[');
        cbytelanes_store_word(out + 8 * half, word | cbytelanes_upper64(word) >> 2);
        result.ends |= cbytelanes_gather64(ends) << (8 * half);
        result.unusual |= cbytelanes_gather64(unusual) << (8 * half);
    }
    return result;
}

CBYTELANES_INLINE cbytelanes_path cbytelanes_scan_path_portable(const uint8_t *in, uint8_t *out) {
    cbytelanes_path result = {0, 0, 0, 0};
    for (int half = 0; half < 2; half++) {
        uint64_t word = cbytelanes_word(in + 8 * half);
        cbytelanes_store_word(out + 8 * half, word);
        result.ends |= cbytelanes_gather64(cbytelanes_equal64(word, '?') | cbytelanes_equal64(word, '#')) << (8 * half);
        result.slashes |= cbytelanes_gather64(cbytelanes_equal64(word, '/')) << (8 * half);
        result.dots |= cbytelanes_gather64(cbytelanes_equal64(word, '.')) << (8 * half);
        result.percents |= cbytelanes_gather64(cbytelanes_equal64(word, '%')) << (8 * half);
    }
    return result;
}

// --- The scans the normaliser calls -----------------------------------------------------------------

/// The host block at `in`: its masks, and its sixteen bytes with ASCII letters lowered written to `out`.
CBYTELANES_INLINE cbytelanes_host cbytelanes_scan_host(const uint8_t *in, uint8_t *out) {
#if defined(__SSE2__)
    __m128i block = _mm_loadu_si128((const __m128i *)in);
    __m128i ends = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(block, _mm_set1_epi8('/')), _mm_cmpeq_epi8(block, _mm_set1_epi8('?'))),
        _mm_or_si128(_mm_cmpeq_epi8(block, _mm_set1_epi8('#')), _mm_cmpeq_epi8(block, _mm_set1_epi8(':'))));
    __m128i unusual = _mm_or_si128(_mm_cmpeq_epi8(block, _mm_set1_epi8('@')), _mm_cmpeq_epi8(block, _mm_set1_epi8('[')));
    // Signed compares: a byte of 0x80 or more is negative, so never taken for a letter.
    __m128i upper = _mm_and_si128(_mm_cmpgt_epi8(block, _mm_set1_epi8('A' - 1)), _mm_cmplt_epi8(block, _mm_set1_epi8('Z' + 1)));
    _mm_storeu_si128((__m128i *)out, _mm_or_si128(block, _mm_and_si128(upper, _mm_set1_epi8(0x20))));
    cbytelanes_host result = {(uint32_t)_mm_movemask_epi8(ends), (uint32_t)_mm_movemask_epi8(unusual)};
    return result;
#else
    return cbytelanes_scan_host_portable(in, out);
#endif
}

/// The path block at `in`: its masks, and its sixteen bytes copied to `out` as they are.
CBYTELANES_INLINE cbytelanes_path cbytelanes_scan_path(const uint8_t *in, uint8_t *out) {
#if defined(__SSE2__)
    __m128i block = _mm_loadu_si128((const __m128i *)in);
    _mm_storeu_si128((__m128i *)out, block);
    cbytelanes_path result = {
        (uint32_t)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(block, _mm_set1_epi8('?')), _mm_cmpeq_epi8(block, _mm_set1_epi8('#')))),
        (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(block, _mm_set1_epi8('/'))),
        (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(block, _mm_set1_epi8('.'))),
        (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(block, _mm_set1_epi8('%'))),
    };
    return result;
#else
    return cbytelanes_scan_path_portable(in, out);
#endif
}

/// Whether the scans above use SSE2 in this build (tests say which pair they compared).
CBYTELANES_INLINE int cbytelanes_uses_sse2(void) {
#if defined(__SSE2__)
    return 1;
#else
    return 0;
#endif
}

#endif
