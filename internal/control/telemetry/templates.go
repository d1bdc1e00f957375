// SPDX-License-Identifier: Apache-2.0

package telemetry

import (
	"errors"
	"fmt"

	"github.com/netsampler/goflow2/v2/decoders/netflow"
)

// ErrTemplateRefused is what the template store answers goflow2 for a
// template it will not keep: past the exporter's cap, or one that would
// make the data decoder spin (no field consumes a byte).
var ErrTemplateRefused = errors.New("template refused")

// templates is one exporter's NetFlow v9 and IPFIX templates, keyed by
// version, observation domain (source ID) and template ID as goflow2's own
// store is, but bounded: a template flood (new IDs, or new domains, every
// datagram) is refused past max and counted, and never grows memory.
// Redefining a template already held is always allowed: exporters resend
// theirs periodically and after a restart.
//
// goflow2 calls it from the collector's one goroutine per exporter, so it
// needs no lock.
type templates struct {
	max     int
	m       map[uint64]any
	refused uint64 // templates refused since start
}

func newTemplates(max int) *templates { return &templates{max: max, m: map[uint64]any{}} }

func templateKey(version uint16, domain uint32, id uint16) uint64 {
	return uint64(version)<<48 | uint64(domain)<<16 | uint64(id)
}

var _ netflow.NetFlowTemplateSystem = (*templates)(nil)

func (t *templates) AddTemplate(version uint16, domain uint32, id uint16, tmpl any) error {
	k := templateKey(version, domain, id)
	if _, ok := t.m[k]; !ok && len(t.m) >= t.max {
		t.refused++
		return fmt.Errorf("%w: %d templates held, the cap", ErrTemplateRefused, t.max)
	}
	if why := unusable(tmpl); why != "" {
		t.refused++
		return fmt.Errorf("%w: template %d %s", ErrTemplateRefused, id, why)
	}
	t.m[k] = tmpl
	return nil
}

// maxFields bounds a template's fields: what a router's flow template
// needs is a few dozen, and a template's memory is 12 bytes a field.
const maxFields = 256

// unusable says why a template is refused ("": it is not). goflow2
// v2.2.6's DecodeDataSet loops while the payload holds one record of the
// template's fixed size and allocates a value per field per record: a
// template of zero-length fields has size 0 and loops forever, and one of
// thousands of zero-length fields beside a one-byte field allocates
// thousands of values for every byte of a data set. With every field at
// least one byte long, a datagram decodes into at most one value per byte.
func unusable(tmpl any) string {
	var fs [][]netflow.Field
	switch t := tmpl.(type) {
	case netflow.TemplateRecord:
		fs = [][]netflow.Field{t.Fields}
	case netflow.IPFIXOptionsTemplateRecord:
		fs = [][]netflow.Field{t.Scopes, t.Options}
	case netflow.NFv9OptionsTemplateRecord:
		fs = [][]netflow.Field{t.Scopes, t.Options}
	default:
		return "of an unknown kind"
	}
	n := 0
	for _, f := range fs {
		n += len(f)
		for _, x := range f {
			if x.Length == 0 {
				return "has a zero-length field"
			}
		}
	}
	switch {
	case n == 0:
		return "has no field"
	case n > maxFields:
		return fmt.Sprintf("has %d fields, more than %d", n, maxFields)
	}
	return ""
}

func (t *templates) GetTemplate(version uint16, domain uint32, id uint16) (any, error) {
	if tmpl, ok := t.m[templateKey(version, domain, id)]; ok {
		return tmpl, nil
	}
	return nil, netflow.ErrorTemplateNotFound
}

func (t *templates) RemoveTemplate(version uint16, domain uint32, id uint16) (any, error) {
	k := templateKey(version, domain, id)
	tmpl, ok := t.m[k]
	if !ok {
		return nil, netflow.ErrorTemplateNotFound
	}
	delete(t.m, k)
	return tmpl, nil
}

func (t *templates) GetTemplates() netflow.FlowBaseTemplateSet {
	out := make(netflow.FlowBaseTemplateSet, len(t.m))
	for k, v := range t.m {
		out[k] = v
	}
	return out
}
