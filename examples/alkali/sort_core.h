/* Insertion sort of 32-bit words (shared by the firmware and the native benchmark build). */
#ifndef SORT_CORE_H
#define SORT_CORE_H

/* For BPF every index is checked against the words the output buffer holds right before its access,
 * and `fresh` hides the index's history from clang so the check stays in the object the verifier
 * reads (clang would otherwise drop it as implied by the loop). Natively both are no-ops. */
#ifdef __bpf__
#define SORT_MAX_WORDS ((64ul << 20) / 4)
#define fresh(k) __asm__ volatile("" : "+r"(k))
/* after the range check, a no-op mask (SORT_MAX_WORDS is a power of two) the verifier reads as a bound */
#define proven(k) ({ unsigned long p_ = (k); fresh(p_); p_ & (SORT_MAX_WORDS - 1); })
#else
#define proven(k) (k)
#define SORT_MAX_WORDS (~0ul / 4)
#define fresh(k) ((void)0)
#endif

static inline void sort_words(unsigned int *v, unsigned long n)
{
    for (unsigned long i = 1; i < n; i++) {
        unsigned long a = i;
        fresh(a);
        if (a >= SORT_MAX_WORDS)
            break;
        unsigned int x = v[proven(a)];
        unsigned long j = a;
        while (j > 0) {
            unsigned long k = j;
            fresh(k);
            if (k == 0 || k >= SORT_MAX_WORDS || v[proven(k - 1)] <= x)
                break;
            v[proven(k)] = v[proven(k - 1)];
            j = k - 1;
        }
        fresh(j);
        if (j < SORT_MAX_WORDS)
            v[proven(j)] = x;
    }
}

#endif
