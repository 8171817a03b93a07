//! The host buffers of a test program among a history's allocations.

/// The values of a test program's host buffers, given as (size, value) in allocation order
/// among other allocations: the first item of size `sizes[0]`, then the first item after it
/// of size `sizes[1]`, and so on (the table both `pinwise run`'s and `pinwise trace`'s
/// redundant-transfer tests build from a history: `items` are its allocations' sizes and
/// redundancy summaries).
///
/// # Panics
/// If some size was not found in that order (`what` names the buffers in the message).
pub fn in_allocation_order<T>(
    items: impl IntoIterator<Item = (u64, T)>,
    sizes: &[u64],
    what: &str,
) -> Vec<T> {
    let mut want = sizes.iter().peekable();
    let mut got = Vec::with_capacity(sizes.len());
    for (size, value) in items {
        if want.peek() == Some(&&size) {
            want.next();
            got.push(value);
        }
    }
    assert_eq!(
        got.len(),
        sizes.len(),
        "{what}: {} of the {} buffers (sizes {sizes:?}) found in allocation order",
        got.len(),
        sizes.len()
    );
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_taken_in_order_and_others_skipped() {
        let items = [(8, 'x'), (4, 'a'), (8, 'y'), (4, 'b'), (2, 'c'), (4, 'z')];
        assert_eq!(
            in_allocation_order(items, &[4, 4, 2], "t"),
            vec!['a', 'b', 'c']
        );
        // An 8 before the first 4 is not taken for the 8 wanted after it.
        assert_eq!(in_allocation_order(items, &[4, 8], "t"), vec!['a', 'y']);
    }

    #[test]
    #[should_panic(expected = "t: 1 of the 2 buffers")]
    fn a_missing_buffer_is_a_failure() {
        in_allocation_order([(4, 'a'), (2, 'b')], &[2, 4], "t");
    }
}
