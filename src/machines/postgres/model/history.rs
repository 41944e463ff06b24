//! WAL histories in the PostgresCluster world: every promotion starts a new timeline,
//! forked from its parent at the position the promoted server had, so two data
//! directories may stand at the same LSN on histories that disagree past a fork.
//!
//! A position is a timeline and an LSN on it; what a data directory holds of the
//! writable server's history is [`Timelines::shared`] (how far the two agree), not its
//! LSN. A standby that streamed an old primary's last writes after the failover's fork
//! stands at a higher LSN than the new primary's standbys while holding less of the
//! cluster's data: the case a survey comparing LSNs alone gets wrong (the planted
//! `postgrescluster-compare-lsns-only`).

/// A data directory's position: the timeline of its furthest WAL and the LSN on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pos {
    /// The timeline (1 for a new cluster's).
    pub(super) timeline: u32,
    /// The position on it (the world counts commits).
    pub(super) lsn: u64,
}

impl Pos {
    /// A new cluster's first position.
    pub(super) const START: Pos = Pos {
        timeline: 1,
        lsn: 0,
    };
}

/// Every timeline of the world, as PostgreSQL's history files say: each forks from its
/// parent at an LSN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Timelines {
    /// `forks[t - 1]` is timeline `t`'s parent and the LSN it forked at (timeline 1:
    /// `(0, 0)`, no parent).
    forks: Vec<(u32, u64)>,
}

impl Default for Timelines {
    fn default() -> Self {
        Timelines {
            forks: vec![(0, 0)],
        }
    }
}

impl Timelines {
    /// A new timeline forked from `from` (a promotion there): the next unused ID, as
    /// PostgreSQL takes it.
    pub(super) fn fork(&mut self, from: Pos) -> Pos {
        self.forks.push((from.timeline, from.lsn));
        Pos {
            timeline: u32::try_from(self.forks.len()).unwrap_or(u32::MAX),
            lsn: from.lsn,
        }
    }

    /// The timelines `p`'s history passes through, newest first, each with how far on
    /// it that history goes.
    fn chain(&self, p: Pos) -> Vec<(u32, u64)> {
        let mut chain = vec![(p.timeline, p.lsn)];
        let (mut timeline, mut up_to) = (p.timeline, p.lsn);
        while let Some(&(parent, at)) = timeline
            .checked_sub(1)
            .and_then(|i| self.forks.get(usize::try_from(i).ok()?))
            .filter(|(parent, _)| *parent > 0)
        {
            up_to = up_to.min(at);
            chain.push((parent, up_to));
            timeline = parent;
        }
        chain
    }

    /// Whether `p`'s history passes through timeline `t` (it is `t` or forked from it,
    /// directly or not).
    pub(super) fn descends(&self, p: Pos, t: u32) -> bool {
        self.chain(p).iter().any(|(timeline, _)| *timeline == t)
    }

    /// How much of `head`'s history a data directory at `p` holds: the LSN up to which
    /// their histories agree (at their newest common timeline).
    pub(super) fn shared(&self, p: Pos, head: Pos) -> u64 {
        let theirs = self.chain(head);
        self.chain(p)
            .into_iter()
            .find_map(|(t, mine)| {
                theirs
                    .iter()
                    .find(|(u, _)| *u == t)
                    .map(|(_, their)| mine.min(*their))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(timeline: u32, lsn: u64) -> Pos {
        Pos { timeline, lsn }
    }

    #[test]
    fn positions_on_one_timeline_share_the_lower_of_the_two() {
        let t = Timelines::default();
        assert_eq!(t.shared(at(1, 3), at(1, 5)), 3);
        assert_eq!(t.shared(at(1, 5), at(1, 3)), 3);
    }

    #[test]
    fn a_standby_past_the_fork_on_the_old_timeline_shares_only_up_to_the_fork() {
        let mut t = Timelines::default();
        let promoted = t.fork(at(1, 2));
        assert_eq!(promoted, at(2, 2));
        // The old primary's standby received 3 on timeline 1; the new primary wrote to 4.
        assert_eq!(t.shared(at(1, 3), at(2, 4)), 2);
        // One short of the fork has all it has.
        assert_eq!(t.shared(at(1, 1), at(2, 4)), 1);
        // A standby that followed the new timeline to 3 holds 3.
        assert_eq!(t.shared(at(2, 3), at(2, 4)), 3);
    }

    #[test]
    fn sibling_timelines_share_up_to_their_common_ancestor() {
        let mut t = Timelines::default();
        let two = t.fork(at(1, 4));
        let three = t.fork(at(1, 2));
        assert_eq!((two.timeline, three.timeline), (2, 3));
        assert_eq!(t.shared(at(2, 6), at(3, 5)), 2);
        // Timeline 4 forks from 2 at 5: it holds 2's history up to 5, and 1's up to 4.
        let four = t.fork(at(2, 5));
        assert_eq!(t.shared(at(2, 6), at(four.timeline, 9)), 5);
        assert_eq!(t.shared(at(1, 9), at(four.timeline, 9)), 4);
    }
}
