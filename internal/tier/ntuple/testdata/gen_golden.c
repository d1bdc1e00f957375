/* gen_golden.c - writes the struct ethtool_rxnfc that ETHTOOL_SRXCLSRLINS
 * takes for each golden rule, laid out by the kernel's own UAPI header, as
 * hex (one file per rule). The Go encoder is tested against these bytes.
 * Regenerate: gcc -o /tmp/gen gen_golden.c && /tmp/gen */
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/ethtool.h>

static void dump(const char *name, struct ethtool_rxnfc *n)
{
	FILE *f = fopen(name, "w");
	const unsigned char *b = (const unsigned char *)n;
	for (size_t i = 0; i < sizeof(*n); i++)
		fprintf(f, "%02x", b[i]);
	fprintf(f, "\n");
	fclose(f);
}

int main(void)
{
	struct ethtool_rxnfc n;

	/* Drop IPv4 source 192.0.2.7, any location. */
	memset(&n, 0, sizeof(n));
	n.cmd = ETHTOOL_SRXCLSRLINS;
	n.fs.flow_type = IP_USER_FLOW;
	inet_pton(AF_INET, "192.0.2.7", &n.fs.h_u.usr_ip4_spec.ip4src);
	n.fs.m_u.usr_ip4_spec.ip4src = 0xffffffff;
	n.fs.h_u.usr_ip4_spec.ip_ver = ETH_RX_NFC_IP4;
	n.fs.ring_cookie = RX_CLS_FLOW_DISC;
	n.fs.location = 5;
	dump("ins-src4.hex", &n);

	/* Drop IPv6 source 2001:db8::7. */
	memset(&n, 0, sizeof(n));
	n.cmd = ETHTOOL_SRXCLSRLINS;
	n.fs.flow_type = IPV6_USER_FLOW;
	inet_pton(AF_INET6, "2001:db8::7", n.fs.h_u.usr_ip6_spec.ip6src);
	memset(n.fs.m_u.usr_ip6_spec.ip6src, 0xff, 16);
	n.fs.ring_cookie = RX_CLS_FLOW_DISC;
	n.fs.location = 6;
	dump("ins-src6.hex", &n);

	/* Forward (to queue 0) TCP 10.0.0.1:40000 > 10.0.0.2:443. */
	memset(&n, 0, sizeof(n));
	n.cmd = ETHTOOL_SRXCLSRLINS;
	n.fs.flow_type = TCP_V4_FLOW;
	inet_pton(AF_INET, "10.0.0.1", &n.fs.h_u.tcp_ip4_spec.ip4src);
	inet_pton(AF_INET, "10.0.0.2", &n.fs.h_u.tcp_ip4_spec.ip4dst);
	n.fs.h_u.tcp_ip4_spec.psrc = htons(40000);
	n.fs.h_u.tcp_ip4_spec.pdst = htons(443);
	n.fs.m_u.tcp_ip4_spec.ip4src = 0xffffffff;
	n.fs.m_u.tcp_ip4_spec.ip4dst = 0xffffffff;
	n.fs.m_u.tcp_ip4_spec.psrc = 0xffff;
	n.fs.m_u.tcp_ip4_spec.pdst = 0xffff;
	n.fs.ring_cookie = 0;
	n.fs.location = 7;
	dump("ins-flow4.hex", &n);

	/* Forward UDP [2001:db8::1]:5353 > [2001:db8::2]:53. */
	memset(&n, 0, sizeof(n));
	n.cmd = ETHTOOL_SRXCLSRLINS;
	n.fs.flow_type = UDP_V6_FLOW;
	inet_pton(AF_INET6, "2001:db8::1", n.fs.h_u.udp_ip6_spec.ip6src);
	inet_pton(AF_INET6, "2001:db8::2", n.fs.h_u.udp_ip6_spec.ip6dst);
	n.fs.h_u.udp_ip6_spec.psrc = htons(5353);
	n.fs.h_u.udp_ip6_spec.pdst = htons(53);
	memset(n.fs.m_u.udp_ip6_spec.ip6src, 0xff, 16);
	memset(n.fs.m_u.udp_ip6_spec.ip6dst, 0xff, 16);
	n.fs.m_u.udp_ip6_spec.psrc = 0xffff;
	n.fs.m_u.udp_ip6_spec.pdst = 0xffff;
	n.fs.location = 8;
	dump("ins-flow6.hex", &n);
	printf("sizeof(ethtool_rxnfc)=%zu fs=%zu\n", sizeof(n), sizeof(n.fs));
	return 0;
}
