package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// writeLayer writes the tree under root as a gzip-compressed tar to w,
// deterministically: entries in WalkDir's lexical order, owned by 0:0 with
// no names, every mtime the epoch, no access or change times, hard links as
// links to the first path, and a gzip header with neither name nor time.
// BestSpeed: images are loaded from local files, where harder compression
// costs more time than the smaller files save. It returns the size of the
// uncompressed tar.
func writeLayer(w io.Writer, root string, epoch time.Time) (int64, error) {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return 0, err
	}
	counted := &countingWriter{w: zw}
	tw := tar.NewWriter(counted)
	links := map[uint64]string{}
	err = filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{
			Name:    name,
			Mode:    tarMode(fi.Mode()),
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			st := fi.Sys().(*syscall.Stat_t)
			if first, ok := links[st.Ino]; ok && st.Nlink > 1 {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				break
			}
			links[st.Ino] = name
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		default:
			return fmt.Errorf("%s: unsupported file type %s", name, fi.Mode().Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return 0, fmt.Errorf("layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return 0, fmt.Errorf("layer: %w", err)
	}
	return counted.n, nil
}

// tarMode is the tar header's mode: permission bits plus setuid, setgid
// and sticky (Go's FileMode keeps those elsewhere).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
