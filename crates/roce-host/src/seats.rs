//! Which member socket sits at which index of the kernel's reuseport
//! group: the model the steering program is built from.
//!
//! The kernel appends a joining socket at the end; when a socket leaves,
//! the *last* one moves into its place (`Vec::swap_remove`). Joins happen
//! under the device file's lock, so they are exact; deaths are seen only
//! afterwards, and several deaths whose order matters leave the seats
//! ambiguous: then a probe round asks the kernel itself.

/// What to do with the seats after some members left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The seats are known: these.
    Exact(Vec<Option<usize>>),
    /// They are not: probe this many seats.
    Probe(usize),
}

/// Most simultaneous departures whose every order is tried.
const MAX_ORDERS: usize = 4;

/// The seats after the members in `gone` left, in whatever order the
/// kernel removed them. Exact when every order gives the same seats.
pub fn after_leaving(seats: &[Option<usize>], gone: &[usize]) -> Plan {
    let live = seats.len() - seats.iter().filter(|s| s.is_some_and(|s| gone.contains(&s))).count();
    let seated: Vec<usize> = gone.iter().copied().filter(|g| seats.contains(&Some(*g))).collect();
    if seats.iter().any(Option::is_none) || seated.len() > MAX_ORDERS {
        return Plan::Probe(live);
    }
    let mut result: Option<Vec<Option<usize>>> = None;
    let mut order = seated.clone();
    for_each_order(&mut order, 0, &mut |o| {
        let mut s = seats.to_vec();
        for g in o {
            let i = s.iter().position(|x| *x == Some(*g)).expect("seated");
            s.swap_remove(i);
        }
        match &result {
            None => result = Some(s),
            Some(r) if *r == s => {}
            Some(_) => result = Some(Vec::new()),
        }
    });
    match result {
        Some(r) if r.len() == live => Plan::Exact(r),
        None => Plan::Exact(seats.to_vec()),
        _ => Plan::Probe(live),
    }
}

fn for_each_order(v: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize])) {
    if k >= v.len() {
        f(v);
        return;
    }
    for i in k..v.len() {
        v.swap(k, i);
        for_each_order(v, k + 1, f);
        v.swap(k, i);
    }
}

/// The seats a probe round of `count` seats found: `answers` are the other
/// members' (slot, seat their probe named); `me` got the seat nobody else
/// named, if exactly one is left. Seats claimed twice stay unknown.
pub fn from_answers(count: usize, answers: &[(usize, u32)], me: usize) -> Vec<Option<usize>> {
    let mut seats: Vec<Option<usize>> = vec![None; count];
    let mut claims = vec![0u32; count];
    for &(slot, seat) in answers {
        if let Some(c) = claims.get_mut(seat as usize) {
            *c += 1;
            seats[seat as usize] = Some(slot);
        }
    }
    for (s, c) in seats.iter_mut().zip(&claims) {
        if *c > 1 {
            *s = None;
        }
    }
    let free: Vec<usize> = (0..count).filter(|&i| claims[i] == 0).collect();
    if let [i] = free[..] {
        seats[i] = Some(me);
    }
    seats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[usize]) -> Vec<Option<usize>> {
        v.iter().map(|&x| Some(x)).collect()
    }

    #[test]
    fn one_departure_moves_the_last_into_its_place() {
        assert_eq!(after_leaving(&s(&[10, 11, 12, 13]), &[11]), Plan::Exact(s(&[10, 13, 12])));
        assert_eq!(after_leaving(&s(&[10, 11, 12, 13]), &[13]), Plan::Exact(s(&[10, 11, 12])));
        assert_eq!(after_leaving(&s(&[10]), &[10]), Plan::Exact(vec![]));
        // A member that had no seat (it died joining) changes nothing.
        assert_eq!(after_leaving(&s(&[10, 11]), &[40]), Plan::Exact(s(&[10, 11])));
    }

    #[test]
    fn several_departures_are_exact_only_when_their_order_cannot_matter() {
        // The tail leaving: nothing moves, whatever the order.
        assert_eq!(after_leaving(&s(&[1, 2, 3, 4]), &[4, 3]), Plan::Exact(s(&[1, 2])));
        // B then C gives [A, E, D]; C then B gives [A, D, E].
        assert_eq!(after_leaving(&s(&[1, 2, 3, 4, 5]), &[2, 3]), Plan::Probe(3));
        // B and E: both orders give [A, D, C].
        assert_eq!(after_leaving(&s(&[1, 2, 3, 4, 5]), &[2, 5]), Plan::Exact(s(&[1, 4, 3])));
        assert_eq!(after_leaving(&s(&[1, 2, 3, 4, 5, 6, 7]), &[1, 2, 3, 4, 5]), Plan::Probe(2));
        // Unknown seats: ask the kernel.
        assert_eq!(after_leaving(&[Some(1), None, Some(3)], &[3]), Plan::Probe(2));
    }

    #[test]
    fn probe_answers_fill_the_seats_and_the_prober_takes_the_one_left() {
        assert_eq!(from_answers(3, &[(7, 0), (9, 2)], 4), s(&[7, 4, 9]));
        // A seat claimed twice (a probe past the group's end fell back to
        // the hash) stays unknown, and so does the prober's.
        assert_eq!(from_answers(3, &[(7, 0), (9, 0)], 4), vec![None, None, None]);
        assert_eq!(from_answers(2, &[(7, 5)], 4), vec![None, None]);
    }
}
