package check

// Overshoots lists the scenarios of rep that took more than their share of
// the plan (requests, effect counts, waits), each as "METHOD row: what";
// none in a run whose check is right.
func Overshoots(rep *Report) []string {
	var out []string
	for _, u := range rep.uses {
		if o := u.over(); o != "" {
			out = append(out, o)
		}
	}
	return out
}
