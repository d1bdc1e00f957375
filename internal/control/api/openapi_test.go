// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tierwall/tierwall/internal/control/apiv1"
	"github.com/tierwall/tierwall/internal/control/bgp"
	"github.com/tierwall/tierwall/internal/control/bgp/community"
	"github.com/tierwall/tierwall/internal/control/config"
	"github.com/tierwall/tierwall/internal/control/daemon"
	"github.com/tierwall/tierwall/internal/control/probed"
	"github.com/tierwall/tierwall/internal/control/telemetry"
	"github.com/tierwall/tierwall/internal/probe/flow"
	"github.com/tierwall/tierwall/internal/probe/flow/flowtest"
	"github.com/tierwall/tierwall/internal/tier/tiertest"
)

// spec is the part of the OpenAPI document these tests read.
type spec struct {
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	Responses map[string]struct {
		Ref     string `json:"$ref"`
		Content map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Nullable             bool               `json:"nullable"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AllOf                []*schema          `json:"allOf"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Enum                 []any              `json:"enum"`
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	var s spec
	if err := json.Unmarshal(openAPI, &s); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return &s
}

// resolve follows $ref and a single allOf (how 3.0 makes a $ref
// nullable).
func (s *spec) resolve(sc *schema) *schema {
	for sc != nil {
		switch {
		case sc.Ref != "":
			sc = s.Components.Schemas[strings.TrimPrefix(sc.Ref, "#/components/schemas/")]
		case len(sc.AllOf) == 1 && sc.Type == "":
			sc = s.resolve(sc.AllOf[0])
		default:
			return sc
		}
	}
	return nil
}

// validate reports where v departs from sc: a wrong type, a null where
// the schema allows none, a documented field missing, an undocumented
// one present.
func (s *spec) validate(path string, sc *schema, v any) []string {
	nullable := sc != nil && sc.Nullable
	sc = s.resolve(sc)
	if sc == nil {
		return []string{path + ": no schema"}
	}
	if v == nil {
		if nullable || sc.Nullable {
			return nil
		}
		return []string{path + ": null"}
	}
	var bad []string
	switch sc.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %T, want an object", path, v)}
		}
		for _, k := range sc.Required {
			if _, ok := m[k]; !ok {
				bad = append(bad, path+"."+k+": missing")
			}
		}
		var extra *schema
		open := len(sc.AdditionalProperties) > 0 && string(sc.AdditionalProperties) != "false"
		if open && string(sc.AdditionalProperties) != "true" {
			extra = new(schema)
			if err := json.Unmarshal(sc.AdditionalProperties, extra); err != nil {
				return []string{path + ": additionalProperties: " + err.Error()}
			}
		}
		for k, x := range m {
			switch p, ok := sc.Properties[k]; {
			case ok:
				bad = append(bad, s.validate(path+"."+k, p, x)...)
			case extra != nil:
				bad = append(bad, s.validate(path+"."+k, extra, x)...)
			case !open:
				bad = append(bad, path+"."+k+": not in the schema")
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %T, want an array", path, v)}
		}
		for i, x := range a {
			bad = append(bad, s.validate(fmt.Sprintf("%s[%d]", path, i), sc.Items, x)...)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return []string{fmt.Sprintf("%s: %T, want a string", path, v)}
		}
		if len(sc.Enum) > 0 && !slices.Contains(sc.Enum, any(str)) {
			bad = append(bad, fmt.Sprintf("%s: %q not in %v", path, str, sc.Enum))
		}
	case "number", "integer":
		f, ok := v.(float64)
		if !ok || sc.Type == "integer" && f != float64(int64(f)) {
			return []string{fmt.Sprintf("%s: %v, want a%s %s", path, v, map[bool]string{true: "n"}[sc.Type == "integer"], sc.Type)}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return []string{fmt.Sprintf("%s: %T, want a boolean", path, v)}
		}
	case "":
		// free-form
	default:
		return []string{path + ": unknown schema type " + sc.Type}
	}
	return bad
}

// openAPIPath is a mux pattern's path as the document writes it.
func openAPIPath(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	return strings.ToLower(method), strings.ReplaceAll(path, "...}", "}")
}

// Every route of both roles is in the document, every operation in the
// document is a route, and every GET documents its answer's schema.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadSpec(t)
	routes := map[string]bool{}
	for _, s := range []*Server{{D: nil, P: &probed.Probed{}}, {D: testDaemonOnly(t)}} {
		for _, p := range s.routes().patterns {
			m, path := openAPIPath(p)
			if m == "" || !strings.HasPrefix(path, "/") {
				t.Errorf("route %q has no method: it answers every method", p)
				continue
			}
			routes[m+" "+path] = true
		}
	}
	for r := range routes {
		m, path, _ := strings.Cut(r, " ")
		if _, ok := doc.Paths[path][m]; !ok {
			t.Errorf("route %s %s is not in openapi.json", strings.ToUpper(m), path)
		}
	}
	var ops []string
	for path, ms := range doc.Paths {
		for m, op := range ms {
			ops = append(ops, m+" "+path)
			if !routes[m+" "+path] {
				t.Errorf("openapi.json documents %s %s, which no route serves", strings.ToUpper(m), path)
			}
			if m != "get" {
				continue
			}
			ok := op.Responses["200"]
			if len(ok.Content) == 0 {
				t.Errorf("GET %s: no response schema", path)
			}
			for ct, c := range ok.Content {
				if c.Schema == nil || doc.resolve(c.Schema) == nil {
					t.Errorf("GET %s: %s without a schema (or a $ref to nothing)", path, ct)
				}
			}
		}
	}
	sort.Strings(ops)
	if len(ops) < len(routes) {
		t.Errorf("%d operations for %d routes", len(ops), len(routes))
	}
}

// testDaemonOnly is a daemon for building routes.
func testDaemonOnly(t *testing.T) *daemon.Daemon {
	d, _, _ := testDaemon(t)
	return d
}

// Every JSON GET of the mitigation role answers what its schema says, on
// a fresh daemon and after some activity: a field that is there in one
// and not the other, undocumented, or a null list fails.
func TestGETAnswersMatchSchemas(t *testing.T) {
	doc := loadSpec(t)
	_, url, step := testDaemon(t)
	mitigation := func(path string) bool { return !strings.HasPrefix(path, "/v1/flows/") }
	checkGETs(t, doc, url, "fresh", mitigation, 10)
	step()
	post(t, url+"/v1/rules", `{"prefix":"192.0.2.0/24","ttl":"1h"}`)
	step()
	checkGETs(t, doc, url, "after activity", mitigation, 10)
}

// The probe role's GETs too (its /v1/status is its /v1/flows/status).
func TestProbeGETAnswersMatchSchemas(t *testing.T) {
	doc := loadSpec(t)
	cfg := config.Default()
	cfg.Role = config.RoleProbe
	cfg.Probe.Policy = map[string]string{"default": "software"}
	sw := flowtest.New(100, 10)
	p, err := probed.Assemble(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), probed.Parts{SW: sw, HW: tiertest.NewFlowTable(10)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&Server{P: p}).Handler())
	defer srv.Close()
	probe := func(path string) bool { return strings.HasPrefix(path, "/v1/flows/") }
	checkGETs(t, doc, srv.URL, "probe, fresh", probe, 4)
	src, dst := netip.MustParseAddrPort("192.0.2.1:1234"), netip.MustParseAddrPort("192.0.2.2:53")
	for range 3 {
		sw.Packet(flowtest.Pkt{Proto: 17, Src: src, Dst: dst, Size: 80, Mark: flow.MarkMiss})
	}
	if err := p.Engine.Flush(); err != nil {
		t.Fatal(err)
	}
	checkGETs(t, doc, srv.URL, "probe, after a flow", probe, 4)
}

// checkGETs validates the answer of every GET of the document that want
// selects (and that takes no path parameter) against its schema.
func checkGETs(t *testing.T, doc *spec, url, when string, want func(string) bool, atLeast int) {
	t.Helper()
	checked := 0
	for path, ms := range doc.Paths {
		op, ok := ms["get"]
		if !ok || strings.Contains(path, "{") || !want(path) {
			continue
		}
		code, h, b := call(t, "GET", url+path)
		if code != http.StatusOK {
			t.Errorf("%s: GET %s: %d %s", when, path, code, b)
			continue
		}
		c, ok := op.Responses["200"].Content["application/json"]
		if !ok {
			if ct := h.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
				t.Errorf("GET %s answers JSON, documented as %v", path, op.Responses["200"].Content)
			}
			continue
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("%s: GET %s: %v", when, path, err)
			continue
		}
		for _, e := range doc.validate(path, c.Schema, v) {
			t.Errorf("%s: GET %s: %s", when, path, e)
		}
		for _, n := range longFractions(b) {
			t.Errorf("%s: GET %s: %s: round it", when, path, n)
		}
		checked++
	}
	if checked < atLeast {
		t.Errorf("%s: only %d GETs checked", when, checked)
	}
}

// longFractions are the numbers in a JSON text with more than three
// decimals: noise, not precision, in a rate or a share.
func longFractions(b []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{err.Error()}
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case json.Number:
			if _, frac, ok := strings.Cut(strings.ToLower(x.String()), "."); ok && (len(frac) > 3 || strings.Contains(frac, "e-")) {
				out = append(out, x.String())
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		case map[string]any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(v)
	return out
}

// The validator catches what it exists for.
func TestSchemaValidator(t *testing.T) {
	doc := loadSpec(t)
	sc := &schema{Ref: "#/components/schemas/Status"}
	for body, want := range map[string]string{
		`{"interface":"x"}`: "missing",
		`{"interface":"x","interval":"1s","hardware":"","started":"","intervals":1,"last_interval":null,"bans":0,"monitor_only":false,"circuit_breaker_open":false,"unban_threshold_pps":1,"learned_threshold_pps":null,"extra":1}`: "not in the schema",
		`{"interface":"x","interval":"1s","hardware":"","started":"","intervals":1.5,"last_interval":null,"bans":0,"monitor_only":false,"circuit_breaker_open":false,"unban_threshold_pps":1,"learned_threshold_pps":null}`:         "want an integer",
		`{"interface":null,"interval":"1s","hardware":"","started":"","intervals":1,"last_interval":null,"bans":0,"monitor_only":false,"circuit_breaker_open":false,"unban_threshold_pps":1,"learned_threshold_pps":null}`:          "null",
	} {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(doc.validate("", sc, v), "; "); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
	var v any
	_ = json.Unmarshal([]byte(`null`), &v)
	if got := doc.validate("", &schema{Type: "array", Items: &schema{Type: "string"}}, v); len(got) == 0 {
		t.Error("a null list passed")
	}
}

// An announced route's communities and a network attack's RTBH action's
// are in the answers and their schemas: both were left out of the JSON
// (json:"-") while the document had no field for them.
func TestCommunitiesMatchSchemas(t *testing.T) {
	doc := loadSpec(t)
	std, _ := community.ParseStandard("64500:666")
	large, _ := community.ParseLarge("4200000000:666:0")
	victim := netip.MustParsePrefix("198.51.100.7/32")
	for _, tc := range []struct {
		schema string
		v      any
		want   []string
	}{
		{"BGPStatus", apiv1.BGPStatus{Enabled: true, Neighbors: []bgp.Neighbor{}, Received: []bgp.Remote{},
			Announced: []bgp.Route{{Kind: bgp.RTBH, Prefix: victim, Reason: "network attack", Rate: 1e6,
				Communities: []community.Standard{std}, LargeCommunities: []community.Large{large}}}},
			[]string{`"communities":["64500:666"]`, `"large_communities":["4200000000:666:0"]`}},
		{"TelemetryStatus", telemetry.Status{Enabled: true, Listen: []netip.AddrPort{}, Exporters: []telemetry.ExporterStats{},
			Attacks: []telemetry.Attack{}, Top: []telemetry.Talker{},
			Plan: []telemetry.Upstream{{Attack: "n1", Kind: telemetry.UpRTBH, Prefix: victim, Reason: "network attack", PPS: 1e6,
				Communities: telemetry.Communities{Standard: []string{"64500:666"}, Large: []string{"4200000000:666:0"}}}}},
			[]string{`"communities":{"standard":["64500:666"],"large":["4200000000:666:0"]}`}},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s: %s lacks %s", tc.schema, b, w)
			}
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		for _, e := range doc.validate(tc.schema, &schema{Ref: "#/components/schemas/" + tc.schema}, v) {
			t.Errorf("%s: %s", tc.schema, e)
		}
	}
}

// The document's event kinds are the daemon's.
func TestOpenAPIEventKinds(t *testing.T) {
	doc := loadSpec(t)
	var kinds []string
	for _, k := range doc.Components.Schemas["Event"].Properties["kind"].Enum {
		kinds = append(kinds, fmt.Sprint(k))
	}
	slices.Sort(kinds)
	want := slices.Sorted(slices.Values(apiv1.EventKinds))
	if !slices.Equal(kinds, want) {
		t.Errorf("openapi.json Event.kind %v, the daemon's %v", kinds, want)
	}
}
