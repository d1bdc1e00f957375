// SPDX-License-Identifier: Apache-2.0

//go:build ndpi

package dpi

/*
#cgo pkg-config: libndpi
#include <stdlib.h>
#include <string.h>
#include <ndpi/ndpi_api.h>

// NDPI_API_VERSION is not ordered: upstream derives it from git history
// (or, outside git, from the build date) to tell an application whether
// the library it runs with was built from the same headers. So it guards
// the ABI at run time (tw_ndpi_open), while the API shape is chosen by
// release: 4.2 has the five-argument ndpi_detection_process_packet,
// ndpi_init_detection_module(prefs) and ndpi_protocol.{master,app}_protocol,
// all of which later releases change.
#ifndef NDPI_API_VERSION
#error "nDPI headers without NDPI_API_VERSION"
#endif
#if !defined(NDPI_MAJOR) || NDPI_MAJOR != 4 || NDPI_MINOR != 2
#error "the nDPI shim is written against the nDPI 4.2 API (Debian 12 libndpi-dev); port it to this release"
#endif

typedef struct {
	uint16_t master, app, category;
	uint8_t confidence, guessed;
} tw_ndpi_result;

static struct ndpi_detection_module_struct *tw_ndpi_open(uint32_t *api) {
	*api = ndpi_get_api_version();
	if (*api != NDPI_API_VERSION)
		return NULL;
	struct ndpi_detection_module_struct *m = ndpi_init_detection_module(ndpi_no_prefs);
	if (m == NULL)
		return NULL;
	NDPI_PROTOCOL_BITMASK all;
	NDPI_BITMASK_SET_ALL(all);
	ndpi_set_protocol_detection_bitmask2(m, &all);
	ndpi_finalize_initialization(m);
	return m;
}

static struct ndpi_flow_struct *tw_ndpi_flow_new(void) {
	struct ndpi_flow_struct *f = ndpi_flow_malloc(SIZEOF_FLOW_STRUCT);
	if (f != NULL)
		memset(f, 0, SIZEOF_FLOW_STRUCT);
	return f;
}

// ndpi_free_flow frees the flow's metadata and the flow; it is not
// idempotent (ndpi_flow_free calls it too: never call both).
static void tw_ndpi_flow_free(struct ndpi_flow_struct *f) {
	ndpi_free_flow(f);
}

static void tw_ndpi_fill(struct ndpi_flow_struct *f, ndpi_protocol p, tw_ndpi_result *r) {
	r->master = p.master_protocol;
	r->app = p.app_protocol;
	r->category = (uint16_t)p.category;
	r->confidence = (uint8_t)f->confidence;
}

static void tw_ndpi_process(struct ndpi_detection_module_struct *m, struct ndpi_flow_struct *f,
			    const unsigned char *pkt, unsigned short len, uint64_t ms, tw_ndpi_result *r) {
	tw_ndpi_fill(f, ndpi_detection_process_packet(m, f, pkt, len, ms), r);
}

static void tw_ndpi_giveup(struct ndpi_detection_module_struct *m, struct ndpi_flow_struct *f, tw_ndpi_result *r) {
	uint8_t guessed = 0;
	tw_ndpi_fill(f, ndpi_detection_giveup(m, f, 1, &guessed), r);
	r->guessed = guessed;
}

static const char *tw_ndpi_host(struct ndpi_flow_struct *f, int *n) {
	*n = (int)strnlen(f->host_server_name, sizeof(f->host_server_name));
	return f->host_server_name;
}

static const char *tw_ndpi_category(struct ndpi_detection_module_struct *m, uint16_t c) {
	return ndpi_category_get_name(m, (ndpi_protocol_category_t)c);
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/tier"
)

// NDPIFlowSize is the C memory of one nDPI flow before what nDPI allocates
// for its metadata (688 bytes in 4.2).
var NDPIFlowSize = int(C.SIZEOF_FLOW_STRUCT)

// maxPacket is what ndpi_detection_process_packet takes (an unsigned
// short length).
const maxPacket = 65535

// NDPI classifies with nDPI. It owns one detection module (about 6 MB,
// 20 ms to build in 4.2), which is not thread-safe: a classifier and its
// flows belong to one goroutine.
type NDPI struct {
	mod   *C.struct_ndpi_detection_module_struct
	pkt   *C.uchar // a copy of the sample, its IP lengths fitted to the capture
	flows int
}

// NewNDPI returns an nDPI classifier with every protocol enabled.
func NewNDPI() (*NDPI, error) {
	var api C.uint32_t
	mod := C.tw_ndpi_open(&api)
	if mod == nil {
		if uint32(api) != uint32(C.NDPI_API_VERSION) {
			return nil, fmt.Errorf("opening nDPI: library API version %d, built against %d", uint32(api), uint32(C.NDPI_API_VERSION))
		}
		return nil, fmt.Errorf("opening nDPI: ndpi_init_detection_module failed")
	}
	return &NDPI{mod: mod, pkt: (*C.uchar)(C.malloc(maxPacket))}, nil
}

func (*NDPI) Name() string { return "ndpi" }

// Version is nDPI's release ("4.2.0").
func (*NDPI) Version() string { return C.GoString(C.ndpi_revision()) }

// Close releases the detection module; every flow must be closed first.
func (n *NDPI) Close() error {
	if n.mod == nil {
		return nil
	}
	if n.flows > 0 {
		return fmt.Errorf("closing nDPI: %d flows still open", n.flows)
	}
	C.ndpi_exit_detection_module(n.mod)
	C.free(unsafe.Pointer(n.pkt))
	n.mod, n.pkt = nil, nil
	return nil
}

// NewFlow implements Classifier. If nDPI cannot allocate the flow (or the
// classifier is closed), the flow gives up at once with "unknown".
func (n *NDPI) NewFlow(key tier.FlowKey, initDir uint8) Flow {
	f := &ndpiFlow{c: n, key: key}
	if n.mod != nil {
		f.f = C.tw_ndpi_flow_new()
	}
	if f.f == nil {
		f.v = verdictFor(AppUnknown, "", SourceNone)
		return f
	}
	n.flows++
	return f
}

type ndpiFlow struct {
	c   *NDPI
	f   *C.struct_ndpi_flow_struct
	key tier.FlowKey
	v   Verdict
}

func (f *ndpiFlow) Add(s *flow.Sample) Verdict {
	if f.v.Done || f.f == nil || f.c.mod == nil || len(s.Data) == 0 {
		return f.v
	}
	n := min(len(s.Data), maxPacket)
	pkt := unsafe.Slice((*byte)(f.c.pkt), maxPacket)[:n]
	copy(pkt, s.Data)
	fitLengths(pkt)
	ts := s.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	var r C.tw_ndpi_result
	C.tw_ndpi_process(f.c.mod, f.f, f.c.pkt, C.ushort(n), C.uint64_t(ts.UnixMilli()), &r)
	// A protocol known from the addresses alone may still be refined by the
	// payload; only a payload verdict ends the flow's DPI.
	if src := ndpiSource(uint8(r.confidence)); (r.app != 0 || r.master != 0) && src >= SourceCache {
		f.v = f.verdict(&r, src)
	}
	return f.v
}

func (f *ndpiFlow) Giveup() Verdict {
	if f.v.Done {
		return f.v
	}
	if f.f == nil || f.c.mod == nil {
		f.v = verdictFor(AppUnknown, "", SourceNone)
		return f.v
	}
	var r C.tw_ndpi_result
	C.tw_ndpi_giveup(f.c.mod, f.f, &r)
	src := ndpiSource(uint8(r.confidence))
	if r.guessed != 0 && src < SourcePort {
		src = SourcePort
	}
	if r.app == 0 && r.master == 0 {
		src = SourceNone
	}
	f.v = f.verdict(&r, src)
	return f.v
}

func (f *ndpiFlow) Close() {
	if f.f != nil {
		C.tw_ndpi_flow_free(f.f)
		f.f = nil
		f.c.flows--
	}
}

func (f *ndpiFlow) verdict(r *C.tw_ndpi_result, src Source) Verdict {
	mod := f.c.mod
	app, proto := uint16(r.app), uint16(r.master)
	if app == 0 {
		app = proto
	}
	if proto == 0 {
		proto = app
	}
	v := Verdict{
		Done:     true,
		App:      Canonical(C.GoString(C.ndpi_get_proto_name(mod, C.u_int16_t(app)))),
		Proto:    Canonical(C.GoString(C.ndpi_get_proto_name(mod, C.u_int16_t(proto)))),
		Category: Canonical(C.GoString(C.tw_ndpi_category(mod, r.category))),
		Source:   src,
	}
	var hn C.int
	h := C.tw_ndpi_host(f.f, &hn)
	v.Host = normHost(stripPort(C.GoStringN(h, hn)))
	return v
}

// ndpiSource maps ndpi_confidence_t.
func ndpiSource(c uint8) Source {
	switch c {
	case C.NDPI_CONFIDENCE_MATCH_BY_PORT:
		return SourcePort
	case C.NDPI_CONFIDENCE_MATCH_BY_IP:
		return SourceIP
	case C.NDPI_CONFIDENCE_DPI_CACHE:
		return SourceCache
	case C.NDPI_CONFIDENCE_DPI:
		return SourceDPI
	}
	return SourceNone
}

// fitLengths makes the IP header's length match a packet cut by the snap
// length: nDPI drops IPv4 packets shorter than their total length and
// IPv6 packets shorter than their payload length.
func fitLengths(p []byte) {
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		if int(binary.BigEndian.Uint16(p[2:])) > len(p) {
			binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		}
	case len(p) >= 40 && p[0]>>4 == 6:
		if 40+int(binary.BigEndian.Uint16(p[4:])) > len(p) {
			binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
		}
	}
}
