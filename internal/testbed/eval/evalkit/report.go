// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// WriteResults writes an experiment's raw results as JSON (dir/name) and
// its document md (text): the two files every report commits side by side.
func WriteResults(dir, name string, res any, md, text string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", dir, err)
	}
	raw, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		return fmt.Errorf("encoding the results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", md, err)
	}
	return nil
}
