// Package syncbuf is a bytes.Buffer that goroutines may write while a test
// reads it: the log of a server or process under test. It lives in the api
// module, which every module of the repository requires, so that their
// tests share one, and needs only the standard library.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent use. The zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// Len is how many bytes were written so far.
func (s *Buffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// From is what was written after the first n bytes.
func (s *Buffer) From(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b.Bytes()[min(n, s.b.Len()):])
}
