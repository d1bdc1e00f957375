// SPDX-License-Identifier: Apache-2.0

package evalkit

import (
	"fmt"
	"os/exec"
	"strings"
)

// Sh runs a command and returns its combined output; its error quotes
// the command and the output.
func Sh(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args[:min(len(args), 4)], " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ShIn runs a command with stdin as its input.
func ShIn(stdin string, args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %.300s", strings.Join(args, " "), err, out)
	}
	return nil
}
