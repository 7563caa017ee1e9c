//! Who owns which block of the paged key/value pool: reference counts, the free list, and the prefix
//! cache, a radix tree whose edges are full blocks of tokens. Blocks that no sequence uses but the
//! tree still names are reused by later requests with the same prefix, and evicted least recently
//! used (leaves first) when the pool runs out.

use std::collections::HashMap;

/// A node of the prefix tree: one full block of tokens after its parent's.
#[derive(Debug)]
struct Node {
    parent: usize,
    key: Vec<u32>,
    block: u32,
    children: HashMap<Vec<u32>, usize>,
    last_used: u64,
}

const ROOT: usize = 0;

/// Reference counts and the prefix tree over a pool of `n_blocks` blocks of `block_size` positions.
#[derive(Debug)]
pub(crate) struct BlockManager {
    block_size: usize,
    refs: Vec<u32>,
    cached_in: Vec<Option<usize>>,
    free: Vec<u32>,
    referenced: usize,
    nodes: Vec<Option<Node>>,
    spare_nodes: Vec<usize>,
    clock: u64,
}

impl BlockManager {
    pub(crate) fn new(n_blocks: usize, block_size: usize) -> Self {
        let root = Node {
            parent: ROOT,
            key: Vec::new(),
            block: u32::MAX,
            children: HashMap::new(),
            last_used: 0,
        };
        Self {
            block_size,
            refs: vec![0; n_blocks],
            cached_in: vec![None; n_blocks],
            free: (0..n_blocks as u32).rev().collect(),
            referenced: 0,
            nodes: vec![Some(root)],
            spare_nodes: Vec::new(),
            clock: 0,
        }
    }

    pub(crate) fn block_size(&self) -> usize {
        self.block_size
    }

    pub(crate) fn n_blocks(&self) -> usize {
        self.refs.len()
    }

    /// Blocks some sequence uses.
    pub(crate) fn used(&self) -> usize {
        self.referenced
    }

    /// Blocks a new allocation can take: free ones and cached ones nobody uses.
    pub(crate) fn available(&self) -> usize {
        self.n_blocks() - self.referenced
    }

    /// Blocks held only by the prefix cache.
    pub(crate) fn cached_unused(&self) -> usize {
        self.n_blocks() - self.referenced - self.free.len()
    }

    /// Blocks needed for `positions` positions.
    pub(crate) fn blocks_for(&self, positions: usize) -> usize {
        positions.div_ceil(self.block_size)
    }

    /// The live node `id`; ids come from the tree itself, so a dead one only shows a bug, which
    /// reads as a miss rather than a panic.
    fn node(&self, id: usize) -> Option<&Node> {
        self.nodes.get(id)?.as_ref()
    }

    fn node_mut(&mut self, id: usize) -> Option<&mut Node> {
        self.nodes.get_mut(id)?.as_mut()
    }

    fn child(&self, at: usize, key: &[u32]) -> Option<usize> {
        self.node(at)?.children.get(key).copied()
    }

    /// How many leading full blocks of `tokens` the tree holds, at most `max_blocks`.
    #[cfg(test)]
    pub(crate) fn peek_prefix(&self, tokens: &[u32], max_blocks: usize) -> usize {
        let mut at = ROOT;
        let mut matched = 0;
        for key in tokens.chunks_exact(self.block_size).take(max_blocks) {
            match self.child(at, key) {
                Some(child) => {
                    at = child;
                    matched += 1;
                }
                None => break,
            }
        }
        matched
    }

    /// Takes a reference on the cached blocks holding the leading full blocks of `tokens`, at most
    /// `max_blocks`, and returns them in order.
    pub(crate) fn acquire_prefix(&mut self, tokens: &[u32], max_blocks: usize) -> Vec<u32> {
        self.clock += 1;
        let mut at = ROOT;
        let mut blocks = Vec::new();
        for key in tokens.chunks_exact(self.block_size).take(max_blocks) {
            let Some(child) = self.child(at, key) else {
                break;
            };
            let clock = self.clock;
            let Some(node) = self.node_mut(child) else {
                break;
            };
            node.last_used = clock;
            let block = node.block;
            self.retain(block);
            blocks.push(block);
            at = child;
        }
        blocks
    }

    fn retain(&mut self, block: u32) {
        let refs = &mut self.refs[block as usize];
        if *refs == 0 {
            self.referenced += 1;
        }
        *refs += 1;
    }

    /// A block for one sequence's exclusive use, evicting the least recently used unused cached
    /// block when none is free; `None` when every block is in use.
    pub(crate) fn allocate(&mut self) -> Option<u32> {
        let block = match self.free.pop() {
            Some(block) => block,
            None => self.evict_one()?,
        };
        self.retain(block);
        Some(block)
    }

    /// Drops the least recently used leaf of the tree whose block nobody uses, and returns the block.
    fn evict_one(&mut self) -> Option<u32> {
        let victim = self
            .nodes
            .iter()
            .enumerate()
            .skip(1)
            .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
            .filter(|(_, n)| n.children.is_empty() && self.refs[n.block as usize] == 0)
            .min_by_key(|(_, n)| n.last_used)
            .map(|(id, _)| id)?;
        let node = self.nodes[victim].take()?;
        if let Some(parent) = self.node_mut(node.parent) {
            parent.children.remove(&node.key);
        }
        self.spare_nodes.push(victim);
        self.cached_in[node.block as usize] = None;
        Some(node.block)
    }

    /// Gives back one sequence's references; blocks nobody uses and the tree does not hold are free.
    pub(crate) fn release(&mut self, blocks: &[u32]) {
        for &block in blocks {
            let refs = &mut self.refs[block as usize];
            debug_assert!(*refs > 0, "block {block} released more often than taken");
            *refs = refs.saturating_sub(1);
            if *refs == 0 {
                self.referenced -= 1;
                if self.cached_in[block as usize].is_none() {
                    self.free.push(block);
                }
            }
        }
    }

    /// Records the full blocks of `tokens` (whose keys and values `blocks` hold, in order) in the
    /// prefix tree. Where the tree already holds a block for the same tokens, it keeps its own.
    pub(crate) fn insert(&mut self, tokens: &[u32], blocks: &[u32]) {
        self.clock += 1;
        let mut at = ROOT;
        for (key, &block) in tokens.chunks_exact(self.block_size).zip(blocks) {
            let clock = self.clock;
            if let Some(child) = self.child(at, key) {
                if let Some(node) = self.node_mut(child) {
                    node.last_used = clock;
                }
                at = child;
                continue;
            }
            if self.cached_in[block as usize].is_some() {
                // The block already stands for these tokens under another path; stop here.
                return;
            }
            let node = Node {
                parent: at,
                key: key.to_vec(),
                block,
                children: HashMap::new(),
                last_used: clock,
            };
            let id = match self.spare_nodes.pop() {
                Some(id) => {
                    self.nodes[id] = Some(node);
                    id
                }
                None => {
                    self.nodes.push(Some(node));
                    self.nodes.len() - 1
                }
            };
            let Some(parent) = self.node_mut(at) else {
                return;
            };
            parent.children.insert(key.to_vec(), id);
            self.cached_in[block as usize] = Some(id);
            at = id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: usize, salt: u32) -> Vec<u32> {
        (0..n as u32).map(|i| i * 7 + salt).collect()
    }

    #[test]
    fn shared_prefixes_are_found_and_reused_by_reference() {
        let mut m = BlockManager::new(8, 4);
        let a = tokens(10, 0);
        let blocks: Vec<u32> = (0..3).map(|_| m.allocate().expect("free")).collect();
        m.insert(&a, &blocks);
        // Only the two full blocks are cached.
        assert_eq!(m.peek_prefix(&a, 8), 2);
        let mut b = a[..8].to_vec();
        b.extend([99, 98]);
        assert_eq!(m.peek_prefix(&b, 8), 2);
        assert_eq!(m.peek_prefix(&b, 1), 1);
        let shared = m.acquire_prefix(&b, 8);
        assert_eq!(shared, blocks[..2]);
        assert_eq!(m.used(), 3);
        m.release(&blocks);
        assert_eq!(
            m.used(),
            2,
            "the shared blocks are still used by the second sequence"
        );
        m.release(&shared);
        assert_eq!(m.used(), 0);
        assert_eq!(m.cached_unused(), 2);
        assert_eq!(m.available(), 8);
    }

    #[test]
    fn eviction_takes_least_recently_used_leaves_and_never_used_blocks() {
        let mut m = BlockManager::new(4, 2);
        let a = tokens(4, 0);
        let b = tokens(4, 100);
        let ab: Vec<u32> = (0..2).map(|_| m.allocate().expect("free")).collect();
        m.insert(&a, &ab);
        let bb: Vec<u32> = (0..2).map(|_| m.allocate().expect("free")).collect();
        m.insert(&b, &bb);
        m.release(&ab);
        // `a` is touched again; `b` is still in use, so only `a`'s leaf can go.
        let again = m.acquire_prefix(&a, 2);
        m.release(&again);
        assert_eq!(
            m.allocate(),
            Some(ab[1]),
            "a's leaf goes first while b is in use"
        );
        m.release(&bb);
        // `a` was touched after `b` was inserted: `b`'s leaf is the least recently used.
        assert_eq!(m.allocate(), Some(bb[1]));
        assert_eq!(m.allocate(), Some(bb[0]), "b's first block became a leaf");
        assert_eq!(m.allocate(), Some(ab[0]));
        assert_eq!(m.allocate(), None, "every block in use");
        assert_eq!(m.peek_prefix(&a, 2), 0);
    }

    #[test]
    fn a_duplicate_prefix_keeps_the_first_copy() {
        let mut m = BlockManager::new(6, 2);
        let a = tokens(4, 0);
        let first: Vec<u32> = (0..2).map(|_| m.allocate().expect("free")).collect();
        let second: Vec<u32> = (0..2).map(|_| m.allocate().expect("free")).collect();
        m.insert(&a, &first);
        m.insert(&a, &second);
        m.release(&second);
        assert_eq!(
            m.cached_unused(),
            0,
            "the duplicate went back to the free list"
        );
        assert_eq!(m.acquire_prefix(&a, 2), first);
    }
}
