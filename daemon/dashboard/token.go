package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFileName is the generated token's file in the state directory.
const TokenFileName = "dashboard-token"

// MinTokenLength keeps guessable tokens out of a configured file.
const MinTokenLength = 16

// LoadToken returns the access token: from file when set (it must exist), else from
// stateDir's dashboard-token, generated there at first start. generated is true when this
// call made the token, which the caller shows once on the console.
func LoadToken(file, stateDir string) (token, path string, generated bool, err error) {
	if file != "" {
		t, err := readToken(file)
		return t, file, false, err
	}
	if stateDir == "" {
		return "", "", false, errors.New("--dashboard-token-file: not set, and no --state-dir to keep a generated token in")
	}
	path = filepath.Join(stateDir, TokenFileName)
	t, err := readToken(path)
	if err == nil {
		return t, path, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", path, false, err
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", path, false, fmt.Errorf("dashboard token: %w", err)
	}
	t = hex.EncodeToString(b)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", path, false, fmt.Errorf("dashboard token: %w", err)
	}
	// O_EXCL: two starts racing must not hand out different tokens.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		t, err := readToken(path)
		return t, path, false, err
	}
	if err != nil {
		return "", path, false, fmt.Errorf("dashboard token: %w", err)
	}
	_, werr := f.WriteString(t + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", path, false, fmt.Errorf("dashboard token %s: %w", path, werr)
	}
	return t, path, true, nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("dashboard token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < MinTokenLength {
		return "", fmt.Errorf("dashboard token %s: %d characters, want at least %d", path, len(t), MinTokenLength)
	}
	return t, nil
}
