package controller

// EventsIdle reports whether every claim event s raised so far was made.
func EventsIdle(s *Service) bool { return s.claims.idle() }
