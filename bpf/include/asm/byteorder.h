/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * tierwall: stands in for the architecture's <asm/byteorder.h>, of which
 * the vendored UAPI headers only need the bitfield-order macros (from
 * include/uapi/linux/byteorder/{little,big}_endian.h, Linux 6.1). Chosen
 * by the compiler's byte order, so -target bpfel and bpfeb both work and
 * nothing depends on the build host's multiarch headers. The swab and
 * __cpu_to_* helpers are left out: BPF code uses bpf_endian.h instead.
 */
#ifndef _ASM_BYTEORDER_H
#define _ASM_BYTEORDER_H

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#ifndef __LITTLE_ENDIAN
#define __LITTLE_ENDIAN 1234
#endif
#ifndef __LITTLE_ENDIAN_BITFIELD
#define __LITTLE_ENDIAN_BITFIELD
#endif
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#ifndef __BIG_ENDIAN
#define __BIG_ENDIAN 4321
#endif
#ifndef __BIG_ENDIAN_BITFIELD
#define __BIG_ENDIAN_BITFIELD
#endif
#else
#error "unknown byte order"
#endif

#endif /* _ASM_BYTEORDER_H */
