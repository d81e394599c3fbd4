/* Insertion sort of 32-bit words (shared by the firmware and the native benchmark build). */
#ifndef SORT_CORE_H
#define SORT_CORE_H

static inline void sort_words(unsigned int *v, unsigned long n)
{
    for (unsigned long i = 1; i < n; i++) {
        unsigned int x = v[i];
        unsigned long j = i;
        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

#endif
