// SPDX-License-Identifier: Apache-2.0

package probed

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// GET /v1/flows/status names every field in snake_case, as every other
// answer of the API does: the engine's, the software tier's and the NIC's
// counters came out under their Go names (LearnDone, DPILost, Capacity).
func TestStatusJSONIsSnakeCase(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	seen := map[reflect.Type]bool{}
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Array || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || ty == reflect.TypeOf(time.Time{}) || seen[ty] {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if !snake.MatchString(name) {
				t.Errorf("%s.%s (%s): JSON name %q, want snake_case", path, f.Name, ty, name)
			}
			walk(path+"."+name, f.Type)
		}
	}
	walk("status", reflect.TypeOf(Status{}))
	if len(seen) < 4 {
		t.Errorf("walked only %d struct types", len(seen))
	}
}
