package controller

// EventsIdle reports whether every claim event s raised so far was made.
func EventsIdle(s *Service) bool { return s.claims.idle() }

// LockVolume holds id's lock, as a running call does, until the returned
// function is called.
func LockVolume(t interface{ Fatal(...any) }, s *Service, id string) func() {
	unlock, err := s.lock(id)
	if err != nil {
		t.Fatal(err)
	}
	return unlock
}
