/* Sieve of Eratosthenes over flags[0..n): counts the primes below n (benchmark kernel, BPF and native). */
static inline unsigned long sieve(unsigned char *flags, unsigned long n)
{
    unsigned long count = 0;
    for (unsigned long i = 0; i < n; i++)
        flags[i] = 1;
    for (unsigned long i = 2; i < n; i++) {
        if (!flags[i])
            continue;
        count++;
        for (unsigned long j = i + i; j < n; j += i)
            flags[j] = 0;
    }
    return count;
}
