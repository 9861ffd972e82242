//! The stock firmware curve: junction °C → duty, 2 °C of hysteresis going down.

use super::{interpolate, Controller, Observation};

/// How far the temperature must fall before the stock curve lowers the fan.
const HYSTERESIS_C: f64 = 2.0;

pub struct Stock {
    curve: Vec<(f64, f64)>,
    duty: Option<f64>,
}

impl Stock {
    pub fn new(curve: Vec<(f64, f64)>) -> Self {
        Self { curve, duty: None }
    }
}

impl Controller for Stock {
    fn name(&self) -> &'static str {
        "stock"
    }

    fn decide(&mut self, obs: &Observation) -> f64 {
        let rising = interpolate(&self.curve, obs.junction_c);
        let falling = interpolate(&self.curve, obs.junction_c + HYSTERESIS_C);
        let duty = match self.duty {
            None => rising,
            Some(d) if rising > d => rising,
            Some(d) if falling < d => falling,
            Some(d) => d,
        };
        self.duty = Some(duty);
        duty
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(t: f64) -> Observation {
        Observation { t_s: 0.0, junction_c: t, power_w: 0.0, fan_duty_pct: 0.0, load: None }
    }

    #[test]
    fn goes_up_at_once_and_down_only_past_the_hysteresis() {
        let mut s = Stock::new(vec![(40.0, 20.0), (60.0, 40.0)]);
        assert_eq!(s.decide(&obs(50.0)), 30.0);
        assert_eq!(s.decide(&obs(49.0)), 30.0);
        assert_eq!(s.decide(&obs(47.0)), 29.0);
        assert_eq!(s.decide(&obs(55.0)), 35.0);
    }
}
