package stage

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// record is the record NodeStage writes for pvc-1, before Put sets its
// version.
func record() Record {
	id, _ := export.For("pvc-1")
	return Record{
		VolumeID:     "pvc-1",
		SubsystemNQN: id.SubsystemNQN,
		Transport:    "tcp",
		Address:      "127.0.0.1",
		Port:         4420,
		UUID:         id.UUID,
		NGUID:        id.NGUID,
		AccessType:   Mount,
		FsType:       "ext4",
		StagingPath:  "/var/lib/kubelet/staging/pvc-1",
		Complete:     true,
	}
}

func TestPutGetDelete(t *testing.T) {
	s, err := NewStore(filepath.Join(t.TempDir(), "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get("pvc-1"); ok || err != nil {
		t.Fatalf("Get before Put = %v, %v", ok, err)
	}
	want := record()
	if err := s.Put(want); err != nil {
		t.Fatal(err)
	}
	want.Version = Version
	got, ok, err := s.Get("pvc-1")
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	// A fresh store on the same directory (a restarted plugin) reads it.
	s2, err := NewStore(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s2.Get("pvc-1"); err != nil || !ok || got.StagingPath != want.StagingPath {
		t.Fatalf("Get from a new store = %+v, %v, %v", got, ok, err)
	}
	if err := s.Delete("pvc-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("pvc-1"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if _, ok, _ := s.Get("pvc-1"); ok {
		t.Fatal("record still there")
	}
	ents, _ := os.ReadDir(s.Dir())
	if len(ents) != 0 {
		t.Errorf("left behind %v", ents)
	}
}

func TestCorruptRecordIsAClearError(t *testing.T) {
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"truncated":     `{"version":1,"volumeID":"pvc-1"`,
		"garbage":       "\x00\x01binary",
		"empty":         "",
		"other volume":  `{"version":1,"volumeID":"pvc-2","subsystemNQN":"x","uuid":"u","nguid":"n","accessType":"mount","stagingPath":"/s"}`,
		"newer version": `{"version":2,"volumeID":"pvc-1","subsystemNQN":"x","uuid":"u","nguid":"n","accessType":"mount","stagingPath":"/s"}`,
		"unknown field": `{"version":1,"volumeID":"pvc-1","subsystemNQN":"x","uuid":"u","nguid":"n","accessType":"mount","stagingPath":"/s","extra":1}`,
		"bad access":    `{"version":1,"volumeID":"pvc-1","subsystemNQN":"x","uuid":"u","nguid":"n","accessType":"tape","stagingPath":"/s"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(s.Path("pvc-1"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, ok, err := s.Get("pvc-1")
			var e *Error
			if ok || !errors.Is(err, ErrCorrupt) || !errors.As(err, &e) || e.Path != s.Path("pvc-1") {
				t.Fatalf("Get = %v, %v; want *Error wrapping ErrCorrupt naming the file", ok, err)
			}
			if !strings.Contains(err.Error(), s.Path("pvc-1")) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestRejectsUnsafeVolumeIDs(t *testing.T) {
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../etc/passwd", "", "a/b"} {
		if _, _, err := s.Get(id); err == nil {
			t.Errorf("Get(%q) accepted", id)
		}
		r := record()
		r.VolumeID = id
		if err := s.Put(r); err == nil {
			t.Errorf("Put(%q) accepted", id)
		}
	}
	if _, err := NewStore("relative/dir"); err == nil {
		t.Error("NewStore accepted a relative directory")
	}
}

// trailing-data in testdata/fuzz/FuzzDecode: a record followed by more
// JSON (or anything but white space) was accepted, because the decoder
// stops after the first value.
func TestRecordWithTrailingDataIsCorrupt(t *testing.T) {
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(record()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.Path("pvc-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tail := range []string{"0", "{}", `{"version":1}`, "]", "\x00"} {
		if err := os.WriteFile(s.Path("pvc-1"), append(b, tail...), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.Get("pvc-1"); ok || !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get with %q after the record = %v, %v; want ErrCorrupt", tail, ok, err)
		}
	}
	// White space after it is still the record Put wrote.
	if err := os.WriteFile(s.Path("pvc-1"), append(b, " \n\t\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get("pvc-1"); !ok || err != nil {
		t.Errorf("Get with white space after the record = %v, %v", ok, err)
	}
}

// other-volume-identity in testdata/fuzz/FuzzDecode: a record naming a
// subsystem and namespace that are not its volume's was accepted, and
// NodeUnstageVolume disconnects the subsystem its record names. A record
// is accepted only as NodeStage writes it: the volume's own identity, a
// TCP target with an IP address and a port.
func TestRecordMustBeTheVolumesOwn(t *testing.T) {
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := export.For("pvc-2")
	for name, change := range map[string]func(*Record){
		"another volume's subsystem": func(r *Record) { r.SubsystemNQN = other.SubsystemNQN },
		"another volume's UUID":      func(r *Record) { r.UUID = other.UUID },
		"another volume's NGUID":     func(r *Record) { r.NGUID = other.NGUID },
		"no transport":               func(r *Record) { r.Transport = "" },
		"a host name":                func(r *Record) { r.Address = "storage-1" },
		"a long-form address":        func(r *Record) { r.Address = "fd00:0:0::1" },
		"port 0":                     func(r *Record) { r.Port = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			r := record()
			change(&r)
			if err := s.Put(r); err == nil {
				t.Error("Put accepted it")
			}
			r.Version = Version
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Path("pvc-1"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := s.Get("pvc-1"); ok || !errors.Is(err, ErrCorrupt) {
				t.Errorf("Get = %v, %v; want ErrCorrupt", ok, err)
			}
		})
	}
}
