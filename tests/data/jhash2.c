/* jhash2() as include/linux/jhash.h defines it, for test_fidelity_jhash.py:
 * reads "initval w0 w1 ..." lines (hex) and prints the hash of each. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define rol32(w, s) (((w) << (s)) | ((w) >> (32 - (s))))
#define __jhash_mix(a, b, c) { \
	a -= c; a ^= rol32(c, 4);  c += b; b -= a; b ^= rol32(a, 6);  a += c; \
	c -= b; c ^= rol32(b, 8);  b += a; a -= c; a ^= rol32(c, 16); c += b; \
	b -= a; b ^= rol32(a, 19); a += c; c -= b; c ^= rol32(b, 4);  b += a; }
#define __jhash_final(a, b, c) { \
	c ^= b; c -= rol32(b, 14); a ^= c; a -= rol32(c, 11); b ^= a; b -= rol32(a, 25); \
	c ^= b; c -= rol32(b, 16); a ^= c; a -= rol32(c, 4);  b ^= a; b -= rol32(a, 14); \
	c ^= b; c -= rol32(b, 24); }
#define JHASH_INITVAL 0xdeadbeef

static uint32_t jhash2(const uint32_t *k, uint32_t length, uint32_t initval)
{
	uint32_t a, b, c;
	a = b = c = JHASH_INITVAL + (length << 2) + initval;
	while (length > 3) {
		a += k[0]; b += k[1]; c += k[2];
		__jhash_mix(a, b, c);
		length -= 3; k += 3;
	}
	switch (length) {
	case 3: c += k[2]; /* fall through */
	case 2: b += k[1]; /* fall through */
	case 1: a += k[0];
		__jhash_final(a, b, c);
	case 0:
		break;
	}
	return c;
}

int main(void)
{
	char line[512];
	while (fgets(line, sizeof(line), stdin)) {
		uint32_t w[16], n = 0, initval;
		char *p = line, *end;
		initval = strtoul(p, &end, 16);
		for (p = end; n < 16; p = end) {
			unsigned long v = strtoul(p, &end, 16);
			if (end == p)
				break;
			w[n++] = v;
		}
		printf("%08x\n", jhash2(w, n, initval));
	}
	return 0;
}
