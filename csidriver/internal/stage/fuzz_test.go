package stage

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// FuzzDecode feeds the record decoder arbitrary file contents. It never
// panics; what it refuses wraps ErrCorrupt; what it accepts is one JSON
// document (nothing before or after it), is a record NodeStage could have
// written for that volume, and is written back by Put and read by Get
// unchanged.
func FuzzDecode(f *testing.F) {
	rec := record()
	rec.Version = Version
	good, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("pvc-1", good)
	f.Add("pvc-1", append(good, '\n'))
	f.Add("pvc-1", append(good, "\n{}"...))
	f.Add("pvc-2", good)
	f.Add("pvc-1", []byte(`{"version":1,"volumeID":"pvc-1"`))
	f.Add("pvc-1", []byte("\x00\x01binary"))
	f.Add("pvc-1", []byte(""))
	f.Add("pvc-1", []byte("null"))
	f.Add("pvc-1", []byte(`{"version":1,"volumeID":"pvc-1","subsystemNQN":"x","uuid":"u","nguid":"n","accessType":"mount","stagingPath":"/s","extra":1}`))
	f.Add("pvc-1", []byte(`{"version":1,"volumeID":"pvc-1","port":65536}`))
	f.Add("pvc-1", []byte(`{"VERSION":1,"VolumeId":"pvc-1"}`))
	f.Fuzz(func(t *testing.T, volumeID string, b []byte) {
		if export.ValidateVolumeID(volumeID) != nil {
			return // Get refuses the volume ID before it reads anything
		}
		r, err := decode(volumeID, b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted %q, which is not one JSON document", b)
		}
		if err := r.validate(volumeID); err != nil {
			t.Fatalf("accepted a record that does not validate: %v", err)
		}
		id, _ := export.For(volumeID)
		if r.SubsystemNQN != id.SubsystemNQN || r.UUID != id.UUID || r.NGUID != id.NGUID {
			t.Fatalf("accepted a record of volume %s naming another volume's subsystem or namespace: %+v", volumeID, r)
		}

		s, err := NewStore(filepath.Join(t.TempDir(), "node"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(r); err != nil {
			t.Fatalf("Put of an accepted record: %v", err)
		}
		back, ok, err := s.Get(volumeID)
		if err != nil || !ok || !reflect.DeepEqual(back, r) {
			t.Fatalf("Get(Put(%+v)) = %+v, %v, %v", r, back, ok, err)
		}
	})
}
